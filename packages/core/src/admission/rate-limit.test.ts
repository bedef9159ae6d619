import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { MemoryStore } from '../store/memory-store.js';
import { RATE_LIMIT_RESOURCE, rateLimit } from './rate-limit.js';
import { SluiceError } from '../shared/errors.js';

describe('rateLimit', () => {
  it('admits at most limit per key in any window by default (sliding window)', async () => {
    const clock = new ManualClock();
    const perUser = rateLimit({ limit: 5, windowMs: 1000, limiter: { clock } });
    const admitted = async (key: string, n: number) => {
      let count = 0;
      for (let i = 0; i < n; i++) if ((await perUser.try(key)).allowed) count++;
      return count;
    };
    expect(await admitted('u1', 8)).toBe(5);
    expect(await admitted('u2', 8)).toBe(5); // keys are apart
    clock.advance(500);
    expect(await admitted('u1', 3)).toBe(0); // still inside the window of the first five
    const denied = await perUser.try('u1');
    expect(denied.allowed).toBe(false);
    expect(denied.retryAfterMs).toBeGreaterThan(0);
    expect(denied.retryAfterMs).toBeLessThanOrEqual(500);
    clock.advance(501);
    expect(await admitted('u1', 8)).toBe(5);
    expect(perUser.limiter.resources()).toEqual([RATE_LIMIT_RESOURCE]);
    await perUser.close();
  });

  it('charges a cost, takes another algorithm, and leaves the store it was given open unless told', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock });
    let closed = 0;
    const close = store.close.bind(store);
    store.close = async () => {
      closed++;
      await close();
    };
    const perKey = rateLimit({ algorithm: 'gcra', limit: 10, burst: 10, store, limiter: { clock } });
    expect((await perKey.try('k', 10)).allowed).toBe(true);
    expect((await perKey.try('k')).allowed).toBe(false);
    await perKey.close();
    // As with a Limiter: a store passed in stays its owner's.
    expect(closed).toBe(0);
    const owning = rateLimit({ limit: 10, store, closeStore: true, limiter: { clock } });
    await owning.close();
    expect(closed).toBe(1);
  });

  it('refuses a bad limit with a typed error', () => {
    expect(() => rateLimit({ limit: 0 })).toThrow(SluiceError);
    expect(() => rateLimit(null as never)).toThrow(/limit/);
  });

  it('names its own options in errors, says a number given as a string is a string, and refuses an empty key', async () => {
    const error = (options: object) => {
      try {
        rateLimit(options as never);
      } catch (err) {
        return err as SluiceError;
      }
      throw new Error('accepted');
    };
    expect(error({ limit: '5', windowMs: 1000 })).toMatchObject({
      code: 'SLUICE_ERR_INVALID_POLICY',
      field: 'limit',
      message: 'limit: must be an integer, got the string "5"',
    });
    expect(error({ limit: 5, windowMs: -1 })).toMatchObject({ field: 'windowMs', message: expect.stringMatching(/^windowMs: /) });
    expect(error({ limit: 5, algorithm: 'nope' })).toMatchObject({ field: 'algorithm' });
    const perUser = rateLimit({ limit: 5, windowMs: 1000 });
    await expect(perUser.try('')).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_KEY', field: 'key' });
    await expect(perUser.acquire('')).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_KEY' });
    expect((await perUser.try('anonymous')).allowed).toBe(true);
    await perUser.close();
  });
});
