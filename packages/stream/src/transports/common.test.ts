import { describe, expect, it } from 'vitest';
import { TransportErrorCodes } from '../errors.js';
import { backoffMs, checkName, checkPartition, checkPayload, runHandler, withTimeout } from './common.js';

describe('transport checks', () => {
  it('accepts partitions in range and rejects everything else with INVALID', () => {
    expect(checkPartition(0, 4)).toBe(0);
    expect(checkPartition(3, 4)).toBe(3);
    for (const p of [-1, 4, 0.5, Number.NaN, '1', undefined]) {
      expect(() => checkPartition(p, 4)).toThrow(expect.objectContaining({ code: TransportErrorCodes.INVALID }));
    }
  });

  it('accepts names safe for every server and rejects the rest', () => {
    expect(checkName('group', 'sluice-aggregators_1')).toBe('sluice-aggregators_1');
    for (const n of ['', 'a.b', 'a b', 'a*', 'x'.repeat(65), 7]) {
      expect(() => checkName('group', n)).toThrow(expect.objectContaining({ code: TransportErrorCodes.INVALID }));
    }
  });

  it('bounds payloads', () => {
    expect(checkPayload('batch', new Uint8Array(4), 4).byteLength).toBe(4);
    expect(() => checkPayload('batch', new Uint8Array(5), 4)).toThrow(
      expect.objectContaining({ code: TransportErrorCodes.INVALID }),
    );
    expect(() => checkPayload('batch', new Uint8Array(0), 4)).toThrow(
      expect.objectContaining({ code: TransportErrorCodes.INVALID }),
    );
  });
});

describe('backoffMs', () => {
  it('grows exponentially within [half, full] of the ceiling and stays capped', () => {
    expect(backoffMs(0, 100, 5000, () => 0)).toBe(50);
    expect(backoffMs(0, 100, 5000, () => 1)).toBe(100);
    expect(backoffMs(3, 100, 5000, () => 1)).toBe(800);
    expect(backoffMs(40, 100, 5000, () => 1)).toBe(5000);
    expect(backoffMs(40, 100, 5000, () => 0)).toBe(2500);
  });
});

describe('withTimeout', () => {
  it('rejects with UNAVAILABLE when the promise does not settle in time', async () => {
    await expect(withTimeout(new Promise(() => {}), 5, 'publish')).rejects.toMatchObject({
      code: TransportErrorCodes.UNAVAILABLE,
    });
    await expect(withTimeout(Promise.resolve(7), 1000, 'publish')).resolves.toBe(7);
  });
});

describe('runHandler', () => {
  it('swallows a throwing handler and reports it to the hook', async () => {
    const seen: unknown[] = [];
    await runHandler(
      async () => {
        throw new Error('poison');
      },
      new Uint8Array(1),
      { partition: 2 },
      (err, info) => seen.push([String(err), info.partition]),
    );
    expect(seen).toEqual([['Error: poison', 2]]);
  });
});
