/**
 * A driver for profiling one embedded contender alone, e.g.
 *   node --cpu-prof --cpu-prof-dir=/tmp/prof bench/dist/memory/embedded-profile.js try 1000 1 3000
 * (contender: try | rateLimit | trySync-lease; keys; callers; milliseconds). Prints decisions/s.
 */
import { Limiter, MemoryStore, rateLimit } from '@sluice/core';

const HIGH = 1_000_000_000;
const [name = 'try', keysArg = '1000', callersArg = '1', msArg = '3000'] = process.argv.slice(2);
const keys = Array.from({ length: Number(keysArg) }, (_, i) => (keysArg === '1' ? 'hot' : `user-${i}`));

function contender(): { decide: (key: string) => Promise<boolean>; close: () => Promise<void> } {
  if (name === 'rateLimit') {
    const perKey = rateLimit({ limit: HIGH, windowMs: 1000 });
    return { decide: async (key) => (await perKey.try(key)).allowed, close: () => perKey.close() };
  }
  const limiter = new Limiter({
    store: new MemoryStore(),
    closeStore: true,
    resources: { api: { algorithm: 'token-bucket', limit: HIGH, burst: HIGH } },
  });
  return { decide: async (key) => (await limiter.try('api', { key })).allowed, close: () => limiter.close() };
}

async function main(): Promise<void> {
  const c = contender();
  const end = performance.now() + Number(msArg);
  let n = 0;
  const caller = async (first: number): Promise<void> => {
    let i = first;
    while (performance.now() < end) {
      for (let j = 0; j < 64; j++) {
        await c.decide(keys[i]!);
        i = i + 1 === keys.length ? 0 : i + 1;
      }
      n += 64;
    }
  };
  const callers = Number(callersArg);
  await Promise.all(Array.from({ length: callers }, (_, k) => caller(Math.floor((k * keys.length) / callers))));
  await c.close();
  process.stdout.write(`${name} ${keysArg} keys x${callersArg}: ${Math.round(n / (Number(msArg) / 1000)).toLocaleString('en-US')}/s\n`);
}

await main();
