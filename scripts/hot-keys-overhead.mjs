/**
 * What hot-key tracking costs a decision: `Limiter.try` on the in-memory store, with and without
 * `hotKeys: true` (tracking only), alternated in one run so both see the same machine. Two key
 * mixes: one key taking half the calls and the rest spread over 10,000 keys (nearly every other
 * call a miss that replaces the sketch's smallest counter: the worst case), and 50 keys (every
 * call a hit). Prints calls per second and the ratio; no pass/fail.
 * Run after `npm run build`: `node scripts/hot-keys-overhead.mjs`.
 */
import { Limiter } from '@sluice/core';

const CALLS = 200_000;
const ROUNDS = 5;
const limits = { algorithm: 'fixed-window', limit: 1_000_000_000, windowMs: 60_000 };

async function run(keys, hotKeys) {
  const limiter = new Limiter({ resources: { r: hotKeys ? { limits, hotKeys: true } : limits }, maxKeys: 20_000 });
  const start = process.hrtime.bigint();
  for (const key of keys) await limiter.try('r', { key });
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  await limiter.close();
  return keys.length / seconds;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const mixes = {
  'hot key + 10,000 cold keys': Array.from({ length: CALLS }, (_, i) => (i % 2 === 0 ? 'hot' : `k${(i * 7919) % 10_000}`)),
  '50 keys': Array.from({ length: CALLS }, (_, i) => `k${i % 50}`),
};
for (const [name, keys] of Object.entries(mixes)) {
  await run(keys, false); // warm-up
  const off = [];
  const on = [];
  for (let i = 0; i < ROUNDS; i++) {
    off.push(await run(keys, false));
    on.push(await run(keys, true));
  }
  const a = median(off);
  const b = median(on);
  console.log(
    `${name}: without ${Math.round(a).toLocaleString('en')}/s, with ${Math.round(b).toLocaleString('en')}/s, ratio ${(b / a).toFixed(2)} (medians of ${ROUNDS})`,
  );
}
