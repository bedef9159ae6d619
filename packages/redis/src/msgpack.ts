import type { Packr as PackrClass } from 'msgpackr';
import * as encoderOnly from 'msgpackr/pack';

// `msgpackr/pack` is the pure-JS encoder; the package root would also load msgpackr's optional
// native decoder, which nothing here uses. That subpath's typings re-export the root's through a
// path TypeScript does not resolve, so its class is typed as the root's (the same class).
const { Packr } = encoderOnly as unknown as { readonly Packr: typeof PackrClass };

/**
 * The MessagePack the batch script reads its items from in one `cmsgpack.unpack`: one array of
 * numbers and strings. Sending a batch as one binary argument instead of six strings per item
 * saves most of the cost of building and parsing the command, on both sides.
 *
 * msgpackr writes it: integers in the smallest integer type that holds them (up to 32 bits),
 * every other number as a float64, which Lua reads back to the same bits, and strings as str
 * types. No records or extensions (those are for objects, which a batch never holds). It was
 * measured as fast as the encoder written here before it, and faster from a few items on (see
 * docs/benchmarks.md, "Libraries").
 */
const packr = new Packr({ useRecords: false, moreTypes: false });

/** Values the batch items are made of: numbers (finite) and strings. */
export type PackValue = number | string;

/** Encodes `values` as one MessagePack array. Throws a RangeError on a number that is not finite. */
export function packArray(values: readonly PackValue[]): Buffer {
  for (const v of values) {
    // NaN and the infinities would be sent as float64 and read by the script as garbage.
    if (typeof v === 'number' && !Number.isFinite(v)) throw new RangeError(`not a finite number: ${v}`);
  }
  return packr.pack(values);
}
