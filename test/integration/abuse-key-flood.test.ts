/**
 * A flood of distinct keys with a daily window against `sluice serve`, three times the embedded
 * store's key table: new keys of another resource are still admitted, new keys of the flooded
 * resource are admitted (or denied with a retry-after as long as the real wait), and no key in use
 * is reset: a key at its limit stays denied, a key that spent a permit keeps it spent. On Redis
 * (no key table) the same expectations hold.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../env.js';
import { deleteRedisKeys, rulesFile, spawnSluice, storeFlags, type Serve, type TestStore } from '../sluice-serve.js';

const MAX_KEYS = 2000;
const FLOOD = 3 * MAX_KEYS;
const BATCH = 500;

const RULES = `
resources:
  daily:
    limits: { algorithm: fixed-window, limit: 100, windowMs: 86400000 }
  other:
    limits:
      - { id: minute, algorithm: sliding-window, limit: 10, windowMs: 60000 }
      - { id: day, algorithm: token-bucket, limit: 1000, windowMs: 86400000 }
`;

interface Answer {
  allowed: boolean;
  remaining: number;
  reason: string;
  retryAfterMs: number;
  resetAfterMs: number;
}

async function post<T>(serve: Serve, path: string, body: unknown): Promise<T> {
  const res = await fetch(`${serve.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as T;
}

async function checkAll(serve: Serve, items: readonly object[]): Promise<Answer[]> {
  const out: Answer[] = [];
  for (let from = 0; from < items.length; from += BATCH) {
    const { results } = await post<{ results: Answer[] }>(serve, '/v1/check', { items: items.slice(from, from + BATCH) });
    out.push(...results);
  }
  return out;
}

async function scenario(serve: Serve): Promise<void> {
  // A key at its limit, and one that spent a permit, before the flood.
  expect((await post<Answer>(serve, '/v1/check', { resource: 'daily', key: 'full', cost: 100 })).allowed).toBe(true);
  expect(await post<Answer>(serve, '/v1/check', { resource: 'daily', key: 'spent' })).toMatchObject({
    allowed: true,
    remaining: 99,
  });
  const flood = Array.from({ length: FLOOD }, (_, i) => ({ resource: 'daily', key: `flood-${i}` }));
  const flooded = await checkAll(serve, flood);
  expect(flooded.filter((a) => a.allowed).length).toBeGreaterThan(MAX_KEYS);

  // New keys of another resource are admitted, and keep their limits exactly.
  const others = Array.from({ length: 100 }, (_, i) => ({ resource: 'other', key: `user-${i}` }));
  for (const answer of await checkAll(serve, others)) expect(answer).toMatchObject({ allowed: true, remaining: 9 });
  const twice = await checkAll(
    serve,
    others.map((o) => ({ ...o, cost: 9 })),
  );
  for (const answer of twice) expect(answer).toMatchObject({ allowed: true, remaining: 0 });
  for (const answer of await checkAll(serve, others)) expect(answer.allowed).toBe(false);

  // New keys of the flooded resource: admitted, or denied until the window they are held to ends.
  const full = await post<Answer>(serve, '/v1/check', { resource: 'daily', key: 'full' });
  expect(full).toMatchObject({ allowed: false, remaining: 0 });
  const fresh = await checkAll(
    serve,
    Array.from({ length: 100 }, (_, i) => ({ resource: 'daily', key: `new-${i}` })),
  );
  const admitted = fresh.filter((a) => a.allowed);
  expect(admitted.length).toBeGreaterThanOrEqual(90);
  for (const a of fresh.filter((x) => !x.allowed)) expect(a.retryAfterMs).toBeGreaterThanOrEqual(full.resetAfterMs - 60_000);

  // No key in use was reset: the full key is still denied, the spent permit still spent, and no
  // flooding key got a second permit beyond its limit's count.
  expect((await post<Answer>(serve, '/v1/check', { resource: 'daily', key: 'spent', cost: 0 })).remaining).toBeLessThanOrEqual(
    99,
  );
  expect((await post<Answer>(serve, '/v1/check', { resource: 'daily', key: 'full' })).allowed).toBe(false);
  const again = await checkAll(
    serve,
    flood.slice(0, 1000).map((f) => ({ ...f, cost: 100 })),
  );
  expect(again.filter((a) => a.allowed)).toHaveLength(0);
}

function spawnTable(rules: string, store: TestStore, prefix: string): Promise<Serve> {
  const args = ['--rules', rules, '--port', '0', '--grpc-port', '0', ...storeFlags(store, prefix)];
  return spawnSluice([...args, '--max-keys', String(MAX_KEYS), '--max-batch', String(BATCH)]);
}

describe.each(['memory', 'redis'] as const)('a flood of keys with a daily window: %s store', (store) => {
  let rules: ReturnType<typeof rulesFile>;
  let serve: Serve;
  const prefix = randomPrefix('flood');
  beforeAll(async () => {
    rules = rulesFile(RULES);
    serve = await spawnTable(rules.path, store, store === 'redis' ? prefix : '');
  });
  afterAll(async () => {
    await serve?.stop();
    rules?.remove();
    if (store === 'redis') await deleteRedisKeys(prefix);
  });

  it('leaves other resources their keys, admits new keys of the flooded one, and resets no key in use', async () => {
    await scenario(serve);
  }, 120_000);
});
