import { describe, expect, it } from 'vitest';
import { TransportErrorCodes } from '../errors.js';
import { MemoryTransport } from './memory.js';

const batch = (n: number): Uint8Array => new Uint8Array(32).fill(n);

describe('MemoryTransport bounds', () => {
  it('rejects publish with UNAVAILABLE when a partition is full, and accepts again once consumed', async () => {
    const t = new MemoryTransport({ partitions: 2, queueCapacity: 3 });
    for (let i = 0; i < 3; i++) await t.publish(0, batch(i));
    await expect(t.publish(0, batch(3))).rejects.toMatchObject({ code: TransportErrorCodes.UNAVAILABLE });
    // Other partitions have their own bound.
    await t.publish(1, batch(0));
    const seen: number[] = [];
    const sub = await t.consume(0, 'g', async (b) => {
      seen.push(b[0]!);
    });
    await expect.poll(() => seen.length).toBe(3);
    await expect.poll(async () => t.publish(0, batch(9)).then(() => true)).toBe(true);
    await expect.poll(() => seen).toEqual([0, 1, 2, 9]);
    await sub.stop();
    await t.close();
  });

  it('copies published batches so callers may reuse their buffers', async () => {
    const t = new MemoryTransport({ partitions: 1 });
    const b = batch(1);
    await t.publish(0, b);
    b.fill(7);
    const seen: number[] = [];
    const sub = await t.consume(0, 'g', async (x) => {
      seen.push(x[0]!);
    });
    await expect.poll(() => seen).toEqual([1]);
    await sub.stop();
    await t.close();
  });

  it('rejects malformed options with SLUICE_ERR_STREAM_INVALID', () => {
    for (const options of [
      { partitions: 0 },
      { partitions: 1025 },
      { partitions: 2, queueCapacity: 0 },
      { partitions: 2, maxGroups: 1.5 },
    ]) {
      expect(() => new MemoryTransport(options)).toThrow(expect.objectContaining({ code: TransportErrorCodes.INVALID }));
    }
  });

  it('caps the number of groups per partition', async () => {
    const t = new MemoryTransport({ partitions: 1, maxGroups: 1 });
    const sub = await t.consume(0, 'a', async () => {});
    await expect(t.consume(0, 'b', async () => {})).rejects.toMatchObject({ code: TransportErrorCodes.INVALID });
    await sub.stop();
    await t.close();
  });
});
