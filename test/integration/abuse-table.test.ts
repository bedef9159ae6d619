/**
 * A flood of distinct keys against `sluice serve`, twice the size of its key table: a hot key's
 * spent permits and its held concurrency leases must survive it, and its checks must be served
 * while it runs. On the embedded store the table is small (`--max-keys`), so the flood fills it:
 * live state is never dropped to make room (it may leave for its resource's conservative summary),
 * and the new leases that find no slot are denied (and counted) rather than let through. On Redis the same flood must leave the same state alone.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../env.js';
import { deleteRedisKeys, rulesFile, spawnSluice, storeFlags, type Serve, type TestStore } from '../sluice-serve.js';

const MAX_KEYS = 2000;
const FLOOD = 2 * MAX_KEYS;
const BATCH = 500;

const RULES = `
resources:
  api:
    limits: { algorithm: token-bucket, limit: 100, windowMs: 86400000 }
  pool:
    limits: { algorithm: concurrency, limit: 20, permitTtlMs: 30000 }
`;

interface Answer {
  allowed: boolean;
  remaining: number;
  reason: string;
  retryAfterMs: number;
  permitId?: string;
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

/** Sends `FLOOD` distinct keys of `resource` in batches; answers how many were allowed. */
async function flood(serve: Serve, resource: string, tag: string): Promise<number> {
  let allowed = 0;
  for (let from = 0; from < FLOOD; from += BATCH) {
    const items = Array.from({ length: BATCH }, (_, i) => ({ resource, key: `${tag}-${from + i}` }));
    const { results } = await post<{ results: Answer[] }>(serve, '/v1/check', { items });
    expect(results).toHaveLength(BATCH);
    allowed += results.filter((r) => r.allowed).length;
  }
  return allowed;
}

async function metric(serve: Serve, line: string): Promise<number> {
  const text = await (await fetch(`${serve.url}/metrics`)).text();
  const found = text.split('\n').find((l) => l.startsWith(line));
  return found === undefined ? 0 : Number(found.slice(line.length).trim());
}

/**
 * The scenario on one server: the hot key spends a permit and holds all 20 leases of the pool,
 * then both resources are flooded (the hot key checked between batches), then the hot key's state
 * is read back. Answers the flood's allowed counts.
 */
async function floodAroundHotKey(serve: Serve): Promise<{ apiAllowed: number; poolAllowed: number }> {
  // One permit, as each flooding key takes: the hot key's state is the first to come to rest.
  const hot = await post<Answer>(serve, '/v1/check', { resource: 'api', key: 'hot' });
  expect(hot).toMatchObject({ allowed: true, remaining: 99 });
  const leases: string[] = [];
  for (let i = 0; i < 20; i++) {
    const d = await post<Answer>(serve, '/v1/acquire', { resource: 'pool', key: 'hot', maxWaitMs: 0 });
    expect(d.allowed).toBe(true);
    leases.push(d.permitId!);
  }

  // The hot key is checked while the flood runs: every check is answered, and correctly.
  let floodDone = false;
  const hotChecks: Answer[] = [];
  const prober = (async () => {
    while (!floodDone) hotChecks.push(await post<Answer>(serve, '/v1/check', { resource: 'api', key: 'hot', cost: 0 }));
  })();
  const apiAllowed = await flood(serve, 'api', 'flood');
  const poolAllowed = await flood(serve, 'pool', 'flood');
  floodDone = true;
  await prober;
  expect(hotChecks.length).toBeGreaterThan(0);
  // Never reset (100 left): on the embedded store its state may have left for the resource's
  // summary, which bounds it from above (a permit or two more spent, never fewer).
  for (const c of hotChecks) {
    expect(c.allowed).toBe(true);
    expect(c.remaining).toBeLessThanOrEqual(99);
  }

  // Its spent permits are still spent.
  const after = await post<Answer>(serve, '/v1/check', { resource: 'api', key: 'hot', cost: 0 });
  expect(after.allowed).toBe(true);
  expect(after.remaining).toBeLessThanOrEqual(99);
  expect(await post<Answer>(serve, '/v1/check', { resource: 'api', key: 'hot', cost: 100 })).toMatchObject({ allowed: false });
  // Its 20 leases are still held: no 21st permit, and each lease is still known.
  expect(await post<Answer>(serve, '/v1/check', { resource: 'pool', key: 'hot' })).toMatchObject({
    allowed: false,
    reason: 'concurrency_limited',
  });
  for (const permitId of leases) {
    expect(await post(serve, '/v1/renew', { resource: 'pool', key: 'hot', permitId })).toEqual({ renewed: true });
  }
  expect(await post(serve, '/v1/release', { resource: 'pool', key: 'hot', permitId: leases[0] })).toEqual({ released: true });
  expect((await post<Answer>(serve, '/v1/check', { resource: 'pool', key: 'hot' })).allowed).toBe(true);
  return { apiAllowed, poolAllowed };
}

/** The service of this file on `store`, with a small key table and wide batches. */
function spawnTable(rules: string, store: TestStore, prefix: string): Promise<Serve> {
  const args = ['--rules', rules, '--port', '0', '--grpc-port', '0', ...storeFlags(store, prefix)];
  return spawnSluice([...args, '--max-keys', String(MAX_KEYS), '--max-batch', String(BATCH)]);
}

describe('a flood of distinct keys, twice the key table', () => {
  describe('embedded in-memory store', () => {
    let rules: ReturnType<typeof rulesFile>;
    let serve: Serve;
    beforeAll(async () => {
      rules = rulesFile(RULES);
      serve = await spawnTable(rules.path, 'memory', '');
    });
    afterAll(async () => {
      await serve?.stop();
      rules?.remove();
    });

    it('keeps the hot key and its leases, serves its checks, shares the table, and refuses leases that find no room', async () => {
      const { apiAllowed, poolAllowed } = await floodAroundHotKey(serve);
      // The rate keys that found no slot were decided on the resource's summary (one permit
      // each fits), and the pool's new keys took slots from the larger resource until both
      // held about half the table; later leases need a slot of their own and were refused.
      expect(apiAllowed).toBe(FLOOD);
      expect(poolAllowed).toBeGreaterThanOrEqual(MAX_KEYS / 2 - 2);
      expect(poolAllowed).toBeLessThanOrEqual(MAX_KEYS / 2 + 2);
      expect(await metric(serve, 'sluice_memory_store_full_total{outcome="refused"}')).toBe(FLOOD - poolAllowed);
      // (The hot key's own checks count too once its state left for the summary.)
      expect(await metric(serve, 'sluice_memory_store_full_total{outcome="summarized"}')).toBeGreaterThanOrEqual(
        FLOOD - (MAX_KEYS - 2),
      );
      expect(await metric(serve, 'sluice_memory_store_full_total{outcome="demoted"}')).toBeGreaterThan(0);
      expect(await metric(serve, 'sluice_memory_store_full_total{outcome="evicted"}')).toBe(0);
      // A refused lease is told when to come back: not before the flood's leases (30 s) expire.
      const refused = await post<Answer>(serve, '/v1/check', { resource: 'pool', key: 'latecomer' });
      expect(refused).toMatchObject({ allowed: false, remaining: 0, reason: 'concurrency_limited' });
      expect(refused.retryAfterMs).toBeGreaterThan(20_000);
    });
  });

  describe('Redis', () => {
    let rules: ReturnType<typeof rulesFile>;
    let serve: Serve;
    const prefix = randomPrefix('table');
    beforeAll(async () => {
      rules = rulesFile(RULES);
      serve = await spawnTable(rules.path, 'redis', prefix);
    });
    afterAll(async () => {
      await serve?.stop();
      rules?.remove();
      await deleteRedisKeys(prefix);
    });

    it('keeps the hot key and its leases and serves its checks; --max-keys bounds only the embedded store', async () => {
      const { apiAllowed, poolAllowed } = await floodAroundHotKey(serve);
      expect(apiAllowed + poolAllowed).toBe(2 * FLOOD);
    });
  });
});
