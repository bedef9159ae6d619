/**
 * One cell of the throughput part, one contender alone in this process, for a profile or a GC
 * trace of it, e.g.
 *   node --trace-gc-nvp bench/dist/redis/cell-profile.js try 100000 16 3000
 *   node --cpu-prof --cpu-prof-dir=/tmp/prof bench/dist/redis/cell-profile.js store 1000 1 3000
 * (contender: try | store | reference | rlf; keys; calls in flight; milliseconds measured after
 * a warm-up of 300 ms, or of the milliseconds given next), against $SLUICE_REDIS_URL. `try` is the bench's Sluice contender
 * (`Limiter.try` on a RedisStore), `store` the store's `consume` alone, without the limiter.
 * Prints decisions/s and the latency percentiles in µs.
 */
import { compileLimits } from '@sluice/core';
import type { Decider } from '../harness/contenders.js';
import { fmtInt } from '../report/table.js';
import { createSluiceStore } from '../harness/sluice-store.js';
import { closedLoop, THROUGHPUT_POLICY, throughputDecider } from './throughput.js';

const [name = 'try', keysArg = '100000', inFlightArg = '16', msArg = '3000', warmupArg = '300'] = process.argv.slice(2);
const url = process.env.SLUICE_REDIS_URL;
if (url === undefined) throw new Error('set SLUICE_REDIS_URL to the Redis to measure against');
// A run of its own: no state of another run is seen.
const run = `profile-${process.pid}-${Date.now()}`;

async function contender(): Promise<Decider> {
  switch (name) {
    case 'try':
      return throughputDecider('sluice', url!, run);
    case 'store': {
      // The same policy as the Sluice contender's, through the store alone.
      const store = await createSluiceStore(url!);
      const limits = compileLimits(THROUGHPUT_POLICY);
      return {
        decide: async (key) => (await store.consume({ key: `${run}:${key}`, limits, cost: 1 })).allowed,
        close: () => store.close(),
      };
    }
    case 'reference':
    case 'rlf':
      return throughputDecider(name, url!, run);
    default:
      throw new Error(`unknown contender ${name}: try | store | reference | rlf`);
  }
}

const keys = Array.from({ length: Number(keysArg) }, (_, i) => (keysArg === '1' ? 'hot' : `user-${i}`));
const decider = await contender();
const r = await closedLoop(decider, (seq) => keys[seq % keys.length]!, Number(inFlightArg), Number(warmupArg), Number(msArg));
await decider.close();
process.stdout.write(
  `${name} ${keysArg} keys x${inFlightArg}: ${fmtInt(r.perSec)}/s, p50 ${fmtInt(r.p50)} p99 ${fmtInt(r.p99)} p99.9 ${fmtInt(r.p999)} µs, ${r.errors} errors\n`,
);
