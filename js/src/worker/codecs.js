// fflate and fzstd, loaded when a sync first compresses: importing them
// took ~25 ms of a worker's start, and most syncs compress nothing. The
// import that needs one runs synchronously, so they are required, not
// imported (both ship CommonJS builds of the same code).

import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

export const fflate = () => require('fflate');
export const fzstd = () => require('fzstd');
