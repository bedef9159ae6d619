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
      -1,
      -32,
      -33,
      -(2 ** 31),
      '',
      'a',
      'x'.repeat(31),
      'y'.repeat(32),
      'ünï',
      'z'.repeat(300),
    ];
    expect(unpack(packArray(values))).toEqual(values);
    expect(unpack(packArray([]))).toEqual([]);
  });

  it('refuses numbers it cannot encode exactly', () => {
    expect(() => packArray([1.5])).toThrow(RangeError);
    expect(() => packArray([2 ** 31])).toThrow(RangeError);
  });
});
