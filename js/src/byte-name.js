// Names that are not UTF-8, carried in the WIT's strings: the spelling of
// guest/core/src/byte_name.rs, which the component decodes. A Linux name is
// any bytes but NUL and `/`; a WIT string is UTF-8. So a path component
// that is not UTF-8 travels as a NUL followed by the lowercase hex of its
// bytes. No real name holds a NUL, and only a component that is not UTF-8
// may take that form: every name has exactly one spelling, and none
// decodes to `.`, `..`, an empty name, a `/` or a NUL.

const MARK = '\0';
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const HEX = /^(?:[0-9a-f]{2})+$/;

/** `bytes` as UTF-8, or undefined where they are not. */
export function utf8(bytes) {
  try {
    return UTF8.decode(bytes);
  } catch {
    return undefined;
  }
}

/** One path component's bytes as a string: itself when UTF-8, else the mark and its hex. */
export const encodeComponent = (bytes) => utf8(bytes) ?? MARK + Buffer.from(bytes).toString('hex');

/** A path's bytes as a string, component by component (`/` kept as is). */
export function encodePath(bytes) {
  const s = utf8(bytes);
  if (s !== undefined) return s;
  return Buffer.from(bytes)
    .toString('latin1')
    .split('/')
    .map((c) => encodeComponent(Buffer.from(c, 'latin1')))
    .join('/');
}

/** Whether `s` holds an encoded component. */
export const hasEncoded = (s) => s.includes(MARK);

/**
 * The name a component spells: the string itself, or the Buffer an encoded
 * one stands for; undefined for a malformed or non-canonical spelling.
 */
export function decodeComponent(s) {
  if (!s.startsWith(MARK)) return s.includes(MARK) ? undefined : s;
  const hex = s.slice(1);
  if (!HEX.test(hex)) return undefined;
  const bytes = Buffer.from(hex, 'hex');
  // UTF-8 (so `.`, `..`, `/`, NUL too) has its own spelling.
  return utf8(bytes) === undefined ? bytes : undefined;
}

/** A path's bytes (a Buffer where any component is encoded, else the string); undefined if malformed. */
export function decodePath(s) {
  if (!hasEncoded(s)) return s;
  const parts = [];
  for (const [i, c] of s.split('/').entries()) {
    const name = decodeComponent(c);
    if (name === undefined) return undefined;
    if (i > 0) parts.push(Buffer.from('/'));
    parts.push(Buffer.from(name));
  }
  return Buffer.concat(parts);
}
