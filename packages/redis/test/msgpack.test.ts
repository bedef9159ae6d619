/**
 * What `packArray` writes, read by Redis' own cmsgpack: the script must see the numbers and
 * strings the client meant, bit for bit.
 */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { packArray, type PackValue } from '../src/msgpack.js';
import { redisUrl } from '../../../test/env.js';
import { unpack } from './msgpack.js';

// Floats come back from Lua as strings of their 17 significant digits (a Lua number is a
// double, and %.17g round-trips one); integers as Redis integers would lose nothing either,
// but one form for both keeps the comparison simple.
const ECHO = `
local values = cmsgpack.unpack(ARGV[1])
local out = {}
for i = 1, #values do
  local v = values[i]
  if type(v) == 'number' then out[i] = 'n' .. string.format('%.17g', v) else out[i] = 's' .. v end
end
return out`;

describe("packArray, read by Redis' cmsgpack", () => {
  const client = new Redis(redisUrl(), { lazyConnect: true });
  afterAll(() => client.disconnect());

  const echo = async (values: readonly PackValue[]): Promise<PackValue[]> => {
    const reply = (await client.eval(ECHO, 0, packArray(values))) as string[];
    return reply.map((r) => (r.startsWith('n') ? Number(r.slice(1)) : r.slice(1)));
  };

  it('reads every integer width and both signs', async () => {
    const values: number[] = [];
    for (let bits = 0; bits <= 53; bits++) {
      const p = 2 ** bits;
      values.push(p - 1, p, -p, -p + 1);
    }
    values.push(Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER, 1_733_290_000_123);
    expect(await echo(values)).toEqual(values);
  });

  it('reads other numbers as the same doubles', async () => {
    const values = [1.5, 0.1 + 0.2, -(2 ** 31) - 0.5, 1e300, -0.25, Number.MIN_VALUE, 2 ** 60, -(2 ** 70)];
    const back = await echo(values);
    back.forEach((v, i) => expect(Object.is(v, values[i]), String(values[i])).toBe(true));
  });

  it('reads strings of every length class, and a long array', async () => {
    const strings = ['', 'a', 'x'.repeat(31), 'y'.repeat(32), 'w'.repeat(255), 'v'.repeat(256), 'u'.repeat(70_000), 'ünï'];
    expect(await echo(strings)).toEqual(strings);
    const many = Array.from({ length: 70_000 }, (_, i) => (i % 2 === 0 ? i : `k${i}`));
    expect(await echo(many)).toEqual(many);
  });

  it('writes what the test decoder reads back, and refuses what is not finite', () => {
    expect(unpack(packArray([]))).toEqual([]);
    expect(() => packArray([Number.NaN])).toThrow(RangeError);
    expect(() => packArray([-Infinity])).toThrow(RangeError);
  });
});
