import { Encoder } from '@msgpack/msgpack';

/**
 * The MessagePack the batch script reads its items from in one `cmsgpack.unpack`: one array of
 * numbers and strings. Sending a batch as one binary argument instead of six strings per item
 * saves most of the cost of building and parsing the command, on both sides.
 *
 * @msgpack/msgpack writes it: safe integers in the smallest integer type that holds them, every
 * other number as a float64 (which Lua reads back to the same bits), strings as str types. It
 * has no dependencies and no install script. msgpackr, used before, was faster (by about 90 ns
 * for one item) but brings an optional native decoder whose install script every `npm install`
 * of the server reported; see docs/benchmarks.md, "Libraries".
 */
const encoder = new Encoder({ initialBufferSize: 512 });

/** Values the batch items are made of: numbers (finite) and strings. */
export type PackValue = number | string;

/** Encodes `values` as one MessagePack array. Throws a RangeError on a number that is not finite. */
export function packArray(values: readonly PackValue[]): Buffer {
  for (const v of values) {
    // NaN and the infinities would be sent as float64 and read by the script as garbage.
    if (typeof v === 'number' && !Number.isFinite(v)) throw new RangeError(`not a finite number: ${v}`);
  }
  // The shared view is copied at once (a Buffer is what the client sends as a bulk string), which
  // costs less than wrapping the encoder's own copy.
  return Buffer.from(encoder.encodeSharedRef(values));
}
