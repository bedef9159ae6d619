import { describe, expect, it } from 'vitest';
import { unpack } from '../test/msgpack.js';
import { packArray } from './msgpack.js';

describe('packArray', () => {
  it('round-trips the integers and strings of a batch', () => {
    const values = [
      0,
      1,
      127,
      128,
      255,
      65536,
      2 ** 31 - 1,
      2 ** 31,
      2 ** 32 - 1,
      2 ** 32,
      Number.MAX_SAFE_INTEGER,
      -1,
      -32,
      -33,
      -(2 ** 31),
      '',
      'a',
      'x'.repeat(31),
      'y'.repeat(32),
      'w'.repeat(255),
      'v'.repeat(65536),
      'ünï',
      'z'.repeat(300),
    ];
    expect(unpack(packArray(values))).toEqual(values);
    expect(unpack(packArray([]))).toEqual([]);
  });

  it('sends other numbers as float64, bit for bit, and refuses what is not finite', () => {
    const values = [1.5, 0.1 + 0.2, -(2 ** 31) - 1, 1e300, -0.25, Number.MIN_VALUE];
    const back = unpack(packArray(values)) as number[];
    back.forEach((v, i) => expect(Object.is(v, values[i]), String(values[i])).toBe(true));
    expect(() => packArray([Number.NaN])).toThrow(RangeError);
    expect(() => packArray([Infinity])).toThrow(RangeError);
  });
});
