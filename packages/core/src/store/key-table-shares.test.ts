import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { rateAlgorithm } from '../algorithms/index.js';
import { ManualClock } from '../shared/clock.js';
import { bound, rebuild } from './key-summary.js';
import { KeyTable } from './key-table.js';
import { MemoryStore } from './memory-store.js';
import { compileLimits, type CompiledLimit } from '../shared/policy.js';

const DAY = 86_400_000;
const HOUR = 3_600_000;

/** One limit of each rate algorithm, and a resource of two, all long-lived. */
const POLICIES: Record<string, readonly CompiledLimit[]> = {
  'token-bucket': compileLimits({ algorithm: 'token-bucket', limit: 3, windowMs: DAY }),
  gcra: compileLimits({ algorithm: 'gcra', limit: 3, windowMs: DAY }),
  'fixed-window': compileLimits({ algorithm: 'fixed-window', limit: 3, windowMs: DAY }),
  'sliding-window': compileLimits({ algorithm: 'sliding-window', limit: 3, windowMs: DAY }),
  'sliding-log': compileLimits({ algorithm: 'sliding-log', limit: 3, windowMs: DAY }),
  'two limits': compileLimits([
    { id: 'hour', algorithm: 'fixed-window', limit: 3, windowMs: HOUR },
    { id: 'day', algorithm: 'token-bucket', limit: 5, windowMs: DAY },
  ]),
};

function storeOf(maxKeys: number, clock: ManualClock): MemoryStore {
  return new MemoryStore({ clock, maxKeys, sweepIntervalMs: 0 });
}

describe('a full key table, shared between resources', () => {
  it('a flood of one resource cannot take the table from another: its new keys get slots and exact limits', () => {
    const clock = new ManualClock(1_000_000);
    const store = storeOf(1000, clock);
    const flood = POLICIES['fixed-window']!;
    const take = (key: string, limits = flood) => store.consumeSync({ key, limits, cost: 1, permitId: '' }).allowed;
    for (let i = 0; i < 5000; i++) take(`a|flood-${i}`);
    expect(store.stats.keys).toBe(1000);
    // 300 new keys of b: each admitted exactly its limit of 3, however long the flood goes on.
    const limits = POLICIES['token-bucket']!;
    for (let round = 0; round < 4; round++) {
      for (let i = 0; i < 300; i++) expect(take(`b|user-${i}`, limits)).toBe(round < 3);
      for (let i = 0; i < 1000; i++) take(`a|more-${round}-${i}`);
    }
    expect(store.stats).toMatchObject({ keys: 1000, refused: 0 });
    expect(store.stats.demoted).toBeGreaterThanOrEqual(300);
    void store.close();
  });

  it('never admits a key more than its limit, whichever keys leave for the summary (every algorithm)', () => {
    for (const [name, limits] of Object.entries(POLICIES)) {
      const clock = new ManualClock(7 * DAY + 1234);
      const store = storeOf(60, clock);
      const admitted = new Map<string, number>();
      let seed = 42;
      const random = (n: number) => {
        seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
        return seed % n;
      };
      for (let i = 0; i < 6000; i++) {
        // Three resources, a few hundred keys each, some hot; a minute of clock in all.
        const key = `r${random(3)}|k${random(i % 7 === 0 ? 10 : 300)}`;
        if (i % 100 === 0) clock.advance(1000);
        if (store.consumeSync({ key, limits, cost: 1, permitId: '' }).allowed) admitted.set(key, (admitted.get(key) ?? 0) + 1);
      }
      const most = Math.max(...admitted.values());
      expect({ name, most }).toEqual({ name, most: 3 });
      // The bound is not bought by denying every key without a slot: three times the keys the
      // table can hold got permits.
      expect(admitted.size, name).toBeGreaterThan(3 * 60);
      void store.close();
    }
  });

  it('tells a refused key the truth: never less than the wait for the first held key to come to rest', () => {
    const pool = compileLimits({ algorithm: 'concurrency', limit: 5, permitTtlMs: 1000 });
    const table = new KeyTable(2);
    const permit = (until: number) => [[{ id: 'l', cost: 1, expiresAt: until }]];
    table.write('a', pool, permit(1000), 1000, 0);
    table.write('b', pool, permit(1000), 1000, 0);
    // Both permits renewed for a minute: their first buckets on the wheel are stale.
    table.write('a', pool, permit(60_500), 60_500, 500);
    table.write('b', pool, permit(61_000), 61_000, 500);
    expect(table.makeRoom('c', 600, pool)).toBe(false);
    expect(table.roomAfterMs(600)).toBeGreaterThanOrEqual(60_500 - 600);
    // And not much more: within a sixteenth of the lifetime left.
    expect(table.roomAfterMs(600)).toBeLessThanOrEqual(60_500 - 600 + 60_000 / 16);
    expect(table.makeRoom('c', 60_400, pool)).toBe(false);
    expect(table.makeRoom('c', 64_000, pool)).toBe(true);
  });
});

describe('summary bounds', () => {
  const limitsOf = Object.values(POLICIES).flat();

  it('a rebuilt state never admits a request its own state denies, now or later', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...limitsOf),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 2 * HOUR })), { maxLength: 8 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 0, max: 2 * DAY }),
        (limit, calls, cost, later) => {
          const algorithm = rateAlgorithm(limit.code)!;
          let now = 10 * DAY;
          let state: readonly number[] | undefined;
          for (const [c, gap] of calls) {
            now += gap;
            const o = algorithm.evaluate(state, c, now, limit);
            if (o.allowed) state = o.next;
          }
          if (state === undefined) return;
          const pair = bound(state, now, limit);
          const at = now + later;
          const own = algorithm.evaluate(state, cost, at, limit);
          if (pair === undefined) {
            // At rest: the state decides as no state would.
            expect(own.allowed).toBe(algorithm.evaluate(undefined, cost, at, limit).allowed);
            return;
          }
          const rebuilt = algorithm.evaluate(rebuild(pair, now, limit), cost, at, limit);
          if (rebuilt.allowed) expect(own.allowed).toBe(true);
          // (An admitted call's remaining counts its own cost: compare like with like.)
          if (rebuilt.allowed === own.allowed) expect(rebuilt.remaining).toBeLessThanOrEqual(own.remaining);
        },
      ),
      { numRuns: 5000 },
    );
  });
});
