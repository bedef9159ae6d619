/**
 * Bytes per key of the in-memory store, per algorithm, after a full GC. Run after
 * `npm run build`:
 *
 *   node --expose-gc bench/dist/memory/per-key.js [--keys 200000]
 *
 * For each policy below a fresh `MemoryStore` (manual clock, no sweep) takes one call on each of
 * `--keys` distinct keys named as the limiter names them (`api:users|user-123456`); the figure is
 * the growth of the V8 heap plus external memory between two full GCs, divided by the keys held.
 * Every limit lasts a day, so every key is live when measured.
 */
import { compileLimits, ManualClock, MemoryStore, type LimitPolicy } from '@sluice/core';

const DAY = 86_400_000;

const POLICIES: ReadonlyArray<readonly [string, LimitPolicy | LimitPolicy[]]> = [
  ['token bucket', { algorithm: 'token-bucket', limit: 100, windowMs: DAY }],
  ['GCRA', { algorithm: 'gcra', limit: 100, windowMs: DAY }],
  ['fixed window', { algorithm: 'fixed-window', limit: 100, windowMs: DAY }],
  ['sliding window', { algorithm: 'sliding-window', limit: 100, windowMs: DAY }],
  ['sliding log', { algorithm: 'sliding-log', limit: 100, windowMs: DAY }],
  ['concurrency', { algorithm: 'concurrency', limit: 100, permitTtlMs: DAY }],
  [
    'two limits (sliding window + token bucket)',
    [
      { id: 'minute', algorithm: 'sliding-window', limit: 10, windowMs: 60_000 },
      { id: 'day', algorithm: 'token-bucket', limit: 1000, windowMs: DAY },
    ],
  ],
];

function collect(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run with node --expose-gc');
  gc();
  gc();
}

function used(): number {
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
}

function bytesPerKey(policy: LimitPolicy | LimitPolicy[], keys: number): number {
  const limits = compileLimits(policy);
  collect();
  const before = used();
  const store = new MemoryStore({ clock: new ManualClock(1_700_000_000_000), maxKeys: keys, sweepIntervalMs: 0 });
  // Keys made as the limiter makes them: a resource name and a caller key joined at run time.
  const resource = 'api:users';
  for (let i = 0; i < keys; i++) {
    const key = `${resource}|user-${100_000 + i}`;
    if (!store.consumeSync({ key, limits, cost: 1, permitId: `p${i}` }).allowed) throw new Error(`key ${i} was denied`);
  }
  collect();
  const after = used();
  if (store.stats.keys !== keys) throw new Error(`held ${store.stats.keys} of ${keys} keys`);
  void store.close();
  return (after - before) / keys;
}

function main(): void {
  const at = process.argv.indexOf('--keys');
  const keys = at < 0 ? 200_000 : Number(process.argv[at + 1]);
  console.log(`in-memory store: bytes per key after GC, ${keys.toLocaleString('en-US')} live keys per policy`);
  for (const [name, policy] of POLICIES) console.log(`${name}: ${Math.round(bytesPerKey(policy, keys))}`);
}

main();
