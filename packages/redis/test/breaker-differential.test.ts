/**
 * lua/outcomes.lua must judge a fleet breaker exactly as core's stepFleetBreaker does. Random
 * sequences of reports (outcomes, probe requests) go to Redis and to the core function; after
 * every step the state, the probe answer and the stored record (probe counters, the window's
 * sums) must agree. The policy's window and open duration are an hour, so Redis' clock and the
 * test's never disagree about time; the passing of the open duration (and of the write-off of
 * unanswered probes) is made by moving the stored opened-at (or last probe) an hour back on both
 * sides.
 *
 * Failures print their seed; rerun with SLUICE_SEED=<seed> to replay.
 */
import { newFleetBreakerRecord, stepFleetBreaker, type FleetBreakerPolicy } from '@sluice/core';
import { afterAll, describe, expect, it } from 'vitest';
import { outcomeKeys } from '../src/index.js';
import { cleanUp, prng, standalone, testSeed } from './helpers.js';

const HOUR = 3_600_000;
/** Runs of 40 steps: at least MIN_RUNS, and more (up to MAX_RUNS) until every state and a probe were seen. */
const MIN_RUNS = 12;
const MAX_RUNS = 60;
const COVERED = ['closed', 'half_open', 'open', 'probe'];
const policy: FleetBreakerPolicy = {
  windowMs: HOUR,
  buckets: 1,
  minimumCalls: 5,
  failureRateThreshold: 0.5,
  slowCallRateThreshold: 0.6,
  openDurationMs: HOUR,
  halfOpenProbes: 2,
};

describe('fleet breaker: Redis and core agree', () => {
  const target = standalone('cbdiff');
  const store = target.store();
  afterAll(async () => {
    await store.close();
    await cleanUp(target.admin(), target.prefix);
  });

  it('on random sequences of reports, probe requests and passing open durations', async () => {
    const seed = testSeed();
    const random = prng(seed);
    const int = (n: number) => Math.floor(random() * n);
    const admin = target.admin();
    const seen = new Set<string>();
    try {
      // Some seeds hand out no probe in the first runs: they go on until one is.
      for (let run = 0; run < MIN_RUNS || (run < MAX_RUNS && seen.size < COVERED.length); run++) {
        const resource = `r${run}`;
        const key = outcomeKeys(target.prefix, resource).breaker;
        const record = newFleetBreakerRecord(policy);
        for (let step = 0; step < 40; step++) {
          const op = int(10);
          const now = Date.now();
          if (op === 0) {
            await admin.hset(key, 'oa', String(now - 2 * HOUR));
            record.openedAt = now - 2 * HOUR;
            continue;
          }
          if (op === 1) {
            await admin.hset(key, 'pl', String(now - 2 * HOUR));
            record.lastProbeAt = now - 2 * HOUR;
            continue;
          }
          const calls = int(4);
          const failures = int(calls + 1);
          const slow = int(calls + 1);
          const takeProbe = random() < 0.4;
          const totals = { calls, failures, slow, totalDurationMs: calls };
          const got = await store.outcomes({ resource, totals, breaker: policy, takeProbe });
          const want = stepFleetBreaker(record, policy, Date.now(), totals, takeProbe);
          const at = `seed ${seed}, run ${run}, step ${step}`;
          seen.add(want.state);
          if (want.probe) seen.add('probe');
          expect({ state: got.breaker?.state, probe: got.breaker?.probe }, at).toEqual({ state: want.state, probe: want.probe });
          const stored = await admin.hgetall(key);
          const window = record.buckets.filter((b) => b.index >= 0);
          const sum = (f: 'calls' | 'failures' | 'slow') => window.reduce((s, b) => s + b[f], 0);
          const storedSum = (f: string) => (Number(stored.i0 ?? -1) >= 0 ? Number(stored[`${f}0`] ?? 0) : 0);
          expect(
            { pt: Number(stored.pt), pk: Number(stored.pk), c: storedSum('c'), f: storedSum('f'), s: storedSum('s') },
            at,
          ).toEqual({ pt: record.probesTaken, pk: record.probesOk, c: sum('calls'), f: sum('failures'), s: sum('slow') });
        }
      }
    } finally {
      admin.disconnect();
    }
    // The sequences went through every state, and probes were handed out.
    expect([...seen].sort(), `seed ${seed}`).toEqual(COVERED);
  });
});
