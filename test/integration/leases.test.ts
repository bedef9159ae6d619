/**
 * Leases across real processes: four processes share one token bucket (1000/s, burst 100)
 * through Redis, each taking batches of permits, under excess demand. Leases are deducted from
 * the global budget, so admissions stay within the documented bound (docs/leases.md) while
 * nearly the whole limit is used.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import { randomPrefix, redisUrl } from '../env.js';

const run = promisify(execFile);
const worker = fileURLToPath(new URL('./fixtures/lease-worker.mjs', import.meta.url));

function maxInWindow(times: number[], windowMs: number): number {
  let max = 0;
  let lo = 0;
  for (let hi = 0; hi < times.length; hi++) {
    while (times[hi]! - times[lo]! >= windowMs) lo++;
    max = Math.max(max, hi - lo + 1);
  }
  return max;
}

it('four processes with leases keep one global limit', async () => {
  const prefix = randomPrefix('lease');
  const durationMs = 4000;
  const startAt = Date.now() + 1500;
  const outputs = await Promise.all(
    [0, 1, 2, 3].map(() =>
      run(process.execPath, [worker, redisUrl(), prefix, String(durationMs), String(startAt)], { maxBuffer: 64 << 20 }),
    ),
  );
  const times = outputs.flatMap((o) => JSON.parse(o.stdout) as number[]).sort((a, b) => a - b);
  const seconds = durationMs / 1000;
  // Bound with leases (ttl 200 ms): burst + limit * (1 s + 0.2 s) in any 1 s window.
  expect(maxInWindow(times, 1000)).toBeLessThanOrEqual(100 + 1200);
  // Over the whole run nothing beyond burst + limit * (time from the first reservation to the
  // last) can pass. Measured as the span of the recorded admissions, not the nominal duration: a
  // worker whose event loop is late on a busy machine admits a little after its 4 s are up, with
  // permits the bucket refilled meanwhile. The first admission is recorded a round trip (and
  // any event-loop delay) after Redis granted its reservation, so allow 50 ms of refill for that.
  const spanSeconds = (times[times.length - 1]! - times[0]!) / 1000;
  expect(times.length).toBeLessThanOrEqual(100 + Math.ceil(1000 * (spanSeconds + 0.05)));
  // Excess demand uses nearly the whole limit.
  expect(times.length).toBeGreaterThanOrEqual(0.9 * 1000 * seconds);
});
