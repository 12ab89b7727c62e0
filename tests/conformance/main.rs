#![allow(clippy::unwrap_used)] // test code: a panic is the failure report
//! End-to-end conformance suite: the real component through the real shim
//! against a real `sh` and `tar`, once on GNU and once on BusyBox.
//!
//! Each numbered test names the seed behaviour it covers (see
//! `paperclip-protocol.md` §3); the rest cover the contract's other clauses.

mod checksum; // --checksum: every file judged by its content, both ways
mod commands; // post-upload commands (seed tests 16-21)
mod compression; // negotiated transport compression, both ways
mod confinement; // path confinement in both directions (1, 2, 6-8, 12, 14, 19, 20)
mod daytona_cli; // the binary's front ends on a Daytona sandbox
mod daytona_hostile; // a hostile toolbox: every answer read against a cap, within the memory budget
mod daytona_sync; // syncs with a Daytona sandbox: call counts and toolbox faults
mod daytona_toolbox; // the Daytona toolbox client against the fake toolbox
mod deadlines; // a call returns within its timeout plus a small grace
mod differential; // tar-stream vs base64 fallback on random trees
mod exclude_differential; // the guest's --exclude emulation against the real GNU tar
mod failures; // bad input, faults and fail-loud behaviour
mod faults; // cut streams, killed sandbox programs, a full host disk
mod hostile; // every attack class from security-anchors.md from a compromised tar
mod incremental; // re-syncs keep what the target holds and land what a full sync lands
mod incremental_out; // sync-out re-syncs leave out what the host target holds
mod jail; // nothing in a local sandbox root, uid 0 included, reaches the host
mod kube_faults; // faults injected by the Kubernetes exec protocol server
mod links; // real workspaces: links that leave a mapping skipped and named, nothing of ours left in the remote dir
mod model; // random edits and syncs: incremental lands exactly what a full sync lands
mod names; // names with any character but NUL and / travel both ways
mod races; // a racer swaps directories for escaping symlinks during syncs
mod replace; // sync-out destroy-then-replace is all or nothing
mod sync_in; // inbound files and directories (3-5, 9)
mod sync_out; // outbound files and directories (10, 11, 13, 15)
mod userlands; // sandboxes missing a tool, or mixing GNU and BusyBox: nothing waits
