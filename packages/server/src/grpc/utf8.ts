import { isUtf8 } from 'node:buffer';

/**
 * Finds string fields of a `RateLimitRequest` that are not valid UTF-8. proto-loader decodes
 * such bytes to U+FFFD, so descriptors that differ only in invalid bytes (`0xFE` and `0xFF`)
 * would share one counter; the server refuses them instead, which needs the raw bytes. The
 * server reads requests with ./wire.ts, which checks strings as it reads them; this separate
 * walk is what wire.test.ts holds it to.
 */

/** Where the strings of a message are: field number -> name and content. */
interface Schema {
  readonly [field: number]: { readonly name: string; readonly repeated?: boolean; readonly of: Schema | 'string' };
}

const ENTRY: Schema = { 1: { name: 'key', of: 'string' }, 2: { name: 'value', of: 'string' } };
const DESCRIPTOR: Schema = { 1: { name: 'entries', repeated: true, of: ENTRY } };
/** envoy.service.ratelimit.v3.RateLimitRequest: domain = 1, descriptors = 2. */
const REQUEST: Schema = { 1: { name: 'domain', of: 'string' }, 2: { name: 'descriptors', repeated: true, of: DESCRIPTOR } };

/** Thrown inside the walk when the bytes are not a protobuf message (the decoder says why). */
class NotAMessage extends Error {}
const NOT_A_MESSAGE = new NotAMessage('not a protobuf message');

/**
 * The path of the first string field of an encoded `RateLimitRequest` that is not valid UTF-8
 * (e.g. `descriptors[0].entries[1].value`), or undefined when every string is valid or the
 * bytes are not a well-formed message.
 */
export function invalidUtf8Field(message: Uint8Array): string | undefined {
  try {
    return walk(message, 0, message.length, REQUEST, '');
  } catch (err) {
    if (err instanceof NotAMessage) return undefined;
    throw err;
  }
}

function walk(buf: Uint8Array, start: number, end: number, schema: Schema, path: string): string | undefined {
  const seen = new Map<number, number>();
  let pos = start;
  while (pos < end) {
    const [tag, afterTag] = varint(buf, pos, end);
    pos = afterTag;
    const wire = tag % 8;
    if (wire === 0) pos = varint(buf, pos, end)[1];
    else if (wire === 1) pos += 8;
    else if (wire === 5) pos += 4;
    else if (wire === 2) {
      const [length, from] = varint(buf, pos, end);
      if (length > end - from) throw NOT_A_MESSAGE;
      const field = Math.floor(tag / 8);
      const spec = schema[field];
      if (spec !== undefined) {
        const index = seen.get(field) ?? 0;
        seen.set(field, index + 1);
        const here = `${path === '' ? '' : `${path}.`}${spec.name}${spec.repeated === true ? `[${index}]` : ''}`;
        if (spec.of === 'string') {
          if (!isUtf8(buf.subarray(from, from + length))) return here;
        } else {
          const bad = walk(buf, from, from + length, spec.of, here);
          if (bad !== undefined) return bad;
        }
      }
      pos = from + length;
    } else {
      throw NOT_A_MESSAGE;
    }
    if (pos > end) throw NOT_A_MESSAGE;
  }
  return undefined;
}

/** A base-128 varint at `pos`: its value (exact up to 2^53) and the position after it. */
function varint(buf: Uint8Array, pos: number, end: number): [number, number] {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 10; i++) {
    if (pos >= end) throw NOT_A_MESSAGE;
    const byte = buf[pos++]!;
    value += (byte & 0x7f) * scale;
    if (byte < 0x80) return [value, pos];
    scale *= 128;
  }
  throw NOT_A_MESSAGE;
}
