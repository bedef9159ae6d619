/**
 * One embedded contender alone, for `node --cpu-prof`, e.g.
 *   node --cpu-prof --cpu-prof-dir=/tmp/prof bench/dist/memory/embedded-profile.js try 1000 1 3000
 * (contender: try | rateLimit; keys; callers; milliseconds): prints decisions/s. With `algorithms`,
 * the CPU time of one awaited `rateLimit(...).try(key)` per algorithm instead (1,000 keys, limit
 * never reached, the least of 5 loops of 300,000 calls):
 *   node bench/dist/memory/embedded-profile.js algorithms
 * With `layers`, the CPU time of each layer of a decision on 1,000 keys (the least of 7 loops of
 * 10^6 calls): the store's `consumeSync`, `try` not awaited, `try` awaited (and on a hot key),
 * `rateLimit(...).try` awaited.
 */
import { Limiter, MemoryStore, rateLimit, type RateLimitOptions } from '@sluice/core';

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

async function loop(): Promise<void> {
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
  process.stdout.write(
    `${name} ${keysArg} keys x${callersArg}: ${Math.round(n / (Number(msArg) / 1000)).toLocaleString('en-US')}/s\n`,
  );
}

async function algorithms(): Promise<void> {
  const cases: Record<string, Partial<RateLimitOptions>> = {
    'sliding-window (default, slices 10)': {},
    'sliding-window, slices 2': { slices: 2 },
    'token-bucket': { algorithm: 'token-bucket' },
    gcra: { algorithm: 'gcra' },
    'fixed-window': { algorithm: 'fixed-window' },
  };
  const limiters = Object.entries(cases).map(([label, o]) => [label, rateLimit({ limit: HIGH, windowMs: 1000, ...o })] as const);
  const least = new Map<string, number>();
  const names = Array.from({ length: 1000 }, (_, i) => `user-${i}`);
  for (let round = 0; round < 5; round++) {
    for (const [label, l] of limiters) {
      const cpu = process.cpuUsage();
      for (let i = 0; i < 300_000; i++) await l.try(names[i % 1000]!);
      const { user, system } = process.cpuUsage(cpu);
      least.set(label, Math.min(least.get(label) ?? Infinity, ((user + system) * 1000) / 300_000));
    }
  }
  for (const [label, ns] of least) process.stdout.write(`${label.padEnd(36)} ${(ns / 1000).toFixed(2)} us/decision\n`);
  await Promise.all(limiters.map(([, l]) => l.close()));
}

/** The least CPU time per call of `fn` over `rounds` loops of `n` calls, nanoseconds. */
async function leastNs(fn: (i: number) => unknown, awaited: boolean, n: number, rounds: number): Promise<number> {
  let least = Infinity;
  for (let r = 0; r < rounds; r++) {
    const cpu = process.cpuUsage();
    if (awaited) for (let i = 0; i < n; i++) await fn(i);
    else for (let i = 0; i < n; i++) fn(i);
    const { user, system } = process.cpuUsage(cpu);
    least = Math.min(least, ((user + system) * 1000) / n);
  }
  return least;
}

async function layers(): Promise<void> {
  const store = new MemoryStore();
  const limiter = new Limiter({ resources: { api: { algorithm: 'token-bucket', limit: HIGH, burst: HIGH } } });
  const perKey = rateLimit({ limit: HIGH, windowMs: 1000 });
  const limits = limiter.limitsOf('api');
  const names = Array.from({ length: 1000 }, (_, i) => `user-${i}`);
  const stored = names.map((k) => `api|${k}`);
  const rows: [string, (i: number) => unknown][] = [
    ['MemoryStore.consumeSync', (i) => void store.consumeSync({ key: stored[i % 1000]!, limits, cost: 1, permitId: '' })],
    ['Limiter.try, not awaited', (i) => void limiter.try('api', { key: names[i % 1000]! })],
    ['await Limiter.try', (i) => limiter.try('api', { key: names[i % 1000]! })],
    ['await Limiter.try, hot key', () => limiter.try('api', { key: 'hot' })],
    ['await rateLimit().try', (i) => perKey.try(names[i % 1000]!)],
  ];
  for (const [label, fn] of rows) {
    const awaited = label.startsWith('await');
    const ns = await leastNs(fn, awaited, 1_000_000, 7);
    process.stdout.write(`${label.padEnd(28)} ${ns.toFixed(0)} ns/call\n`);
  }
  await Promise.all([limiter.close(), perKey.close(), store.close()]);
}

await (name === 'algorithms' ? algorithms() : name === 'layers' ? layers() : loop());
