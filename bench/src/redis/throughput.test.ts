import { describe, expect, it } from 'vitest';
import { addGrowth, redisCost, ZERO_STATS } from '../harness/redis-stats.js';
import type { Decider } from '../harness/contenders.js';
import { closedLoop, LoopTally } from './throughput.js';

/** A decider that answers at once and checks that it is asked `k0`, `k1`, ... in turn. */
function recorder(): Decider & { asked: number; inOrder: boolean } {
  const d = {
    asked: 0,
    inOrder: true,
    decide: (key: string) => {
      if (key !== `k${d.asked}`) d.inOrder = false;
      d.asked++;
      return Promise.resolve(true);
    },
    close: () => Promise.resolve(),
  };
  return d;
}

describe('a cell measured in slices', () => {
  it('adds each slice into one tally, taking up the keys where the last slice left them', async () => {
    const d = recorder();
    const tally = new LoopTally();
    const keyOf = (seq: number) => `k${seq}`;
    const first = await closedLoop(d, keyOf, 2, 0, 200, tally);
    const askedFirst = d.asked;
    const second = await closedLoop(d, keyOf, 2, 0, 200, tally);

    // Every call took the next key: none repeated, none skipped, across the slices.
    expect(d.inOrder).toBe(true);
    expect(d.asked).toBeGreaterThan(askedFirst);
    expect(second.completed).toBe(d.asked);
    expect(second.decisions).toBeGreaterThanOrEqual(first.decisions);
    expect(second.decisions).toBe(tally.histogram.count);
    // The rate is over both slices' measured time.
    expect(tally.measuredMs).toBe(400);
    expect(second.perSec).toBeCloseTo(second.decisions / 0.4, 6);
  });

  it('starts afresh with a new tally', async () => {
    const d = recorder();
    const r = await closedLoop(d, (seq) => `k${seq}`, 1, 0, 100);
    expect(r.completed).toBe(d.asked);
    expect(d.inOrder).toBe(true);
  });
});

describe('Redis counters over slices', () => {
  it('sums the growth of each slice', () => {
    const a = { calls: 10, scripts: 2, usec: 100, cpuSec: 1 };
    const b = { calls: 18, scripts: 4, usec: 150, cpuSec: 1.5 };
    const c = { calls: 30, scripts: 5, usec: 200, cpuSec: 2 };
    const d = { calls: 34, scripts: 6, usec: 260, cpuSec: 2.25 };
    const sum = addGrowth(addGrowth(ZERO_STATS, a, b), c, d);
    expect(sum).toEqual({ calls: 12, scripts: 3, usec: 110, cpuSec: 0.75 });
    expect(redisCost(ZERO_STATS, sum, 6, 1.5)).toEqual({
      callsPerDecision: 2,
      scriptsPerDecision: 0.5,
      usecPerDecision: 110 / 6,
      cpuPercent: 50,
    });
  });

  it('knows nothing once a slice could not read the counters', () => {
    const a = { calls: 1, scripts: 1, usec: 1, cpuSec: 1 };
    expect(addGrowth(ZERO_STATS, undefined, a)).toBeUndefined();
    expect(addGrowth(undefined, a, a)).toBeUndefined();
  });
});
