/* eslint-disable @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-return --
   the assertions read parsed JSON and protobuf answers dynamically */
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisClusterNodes, redisUrl } from '../../../test/env.js';
import {
  RlsClient,
  TOKEN,
  call,
  deleteKeys,
  eventually,
  scratch,
  spawnServer,
  writeRules,
  type ServerProcess,
} from './support.js';

// Refills 30 an hour: during a test, the bucket admits its 30 and nothing more.
const RULES = (limit: number) => `
resources:
  api:global: { limits: { algorithm: token-bucket, limit: ${limit}, windowMs: 3600000 } }
domains:
  - domain: edge
    descriptors:
      - key: tenant
        rate_limit: { unit: hour, requests_per_unit: 5 }
`;

// The default (50 ms) is made for production; three servers and the test runner sharing two
// cores can take longer, and a timeout would hand decisions to the local fallback.
const TIMEOUT = ['--store-timeout-ms', '2000'];

/** Sends `n` checks spread over `servers`, all at once; resolves to how many were allowed. */
async function admitted(servers: readonly ServerProcess[], n: number, key: string): Promise<number> {
  const answers = await Promise.all(
    Array.from({ length: n }, (_, i) => call(servers[i % servers.length]!.url, '/v1/check', { resource: 'api:global', key })),
  );
  for (const a of answers) expect(a.status).toBe(200);
  return answers.filter((a) => a.json.allowed === true).length;
}

describe('several sluice serve processes sharing one Redis', () => {
  const tmp = scratch();
  const prefix = randomPrefix('srv');
  let servers: ServerProcess[] = [];

  beforeAll(async () => {
    const rules = writeRules(tmp.dir, RULES(30));
    servers = await Promise.all(
      [0, 1, 2].map(() => spawnServer(['--rules', rules, '--redis', redisUrl(), '--redis-prefix', prefix, ...TIMEOUT])),
    );
  });
  afterAll(async () => {
    const codes = await Promise.all(servers.map((s) => s.stop()));
    expect(codes).toEqual(servers.map(() => 0));
    const redis = new Redis(redisUrl());
    await deleteKeys(redis, prefix);
    await redis.quit();
    tmp.remove();
  });

  it('keeps one global limit across the servers', async () => {
    expect(await admitted(servers, 90, 'shared')).toBe(30);
    // Each server still answers: further calls are denied everywhere.
    for (const s of servers)
      expect((await call(s.url, '/v1/check', { resource: 'api:global', key: 'shared' })).json.allowed).toBe(false);
  });

  it('keeps one global limit for Envoy descriptors across the servers', async () => {
    const clients = servers.map((s) => new RlsClient(`127.0.0.1:${s.grpcPort}`));
    try {
      const answers = await Promise.all(
        Array.from({ length: 15 }, (_, i) =>
          clients[i % clients.length]!.shouldRateLimit({
            domain: 'edge',
            descriptors: [{ entries: [{ key: 'tenant', value: 'acme' }] }],
          }),
        ),
      );
      expect(answers.filter((a) => a.overall_code === 'OK')).toHaveLength(5);
      expect(answers.filter((a) => a.overall_code === 'OVER_LIMIT')).toHaveLength(10);
    } finally {
      for (const c of clients) c.close();
    }
  });

  it('propagates a rule change to every server live, and a rollback restores the earlier limit', async () => {
    const [a, b, c] = servers as [ServerProcess, ServerProcess, ServerProcess];
    const limitAt = async (s: ServerProcess) =>
      (await call(s.url, '/v1/check', { resource: 'api:global', key: `probe-${Math.random()}` })).json.limit;
    expect(await limitAt(b)).toBe(30);
    const applied = await call(a.url, '/v1/admin/rules', { text: RULES(50), author: 'test', reason: 'raise' }, { token: TOKEN });
    expect(applied.status).toBe(201);
    const version = applied.json.version as number;
    await eventually(async () => (await limitAt(b)) === 50 && (await limitAt(c)) === 50);
    expect((await call(c.url, '/metrics')).json).toMatch(new RegExp(`^sluice_rules_version ${version}$`, 'm'));

    const back = await call(
      b.url,
      '/v1/admin/rules/rollback',
      { version: version - 1, author: 'test', reason: 'revert' },
      { token: TOKEN },
    );
    expect(back.status).toBe(201);
    await eventually(async () => (await limitAt(a)) === 30 && (await limitAt(c)) === 30);
    const history = await call(c.url, '/v1/admin/rules/history', undefined, { token: TOKEN });
    expect(history.json.versions.map((v: { version: number }) => v.version)).toEqual([version + 1, version, version - 1]);
  });

  it('reports the active version the same everywhere', async () => {
    const versions = await Promise.all(servers.map(async (s) => (await call(s.url, '/v1/stats')).json.version as number));
    expect(new Set(versions).size).toBe(1);
  });
});

describe('sluice serve on a Redis Cluster', () => {
  const tmp = scratch();
  const prefix = randomPrefix('srvc');
  let servers: ServerProcess[] = [];
  const nodes = () =>
    redisClusterNodes()
      .map((n) => `${n.host}:${n.port}`)
      .join(',');

  beforeAll(async () => {
    const rules = writeRules(tmp.dir, RULES(20));
    servers = await Promise.all(
      [0, 1].map(() => spawnServer(['--rules', rules, '--redis-cluster', nodes(), '--redis-prefix', prefix, ...TIMEOUT])),
    );
  });
  afterAll(async () => {
    const codes = await Promise.all(servers.map((s) => s.stop()));
    expect(codes).toEqual([0, 0]);
    const cluster = new Cluster(redisClusterNodes());
    await deleteKeys(cluster, prefix);
    await cluster.quit();
    tmp.remove();
  });

  it('keeps one global limit across the servers', async () => {
    expect(await admitted(servers, 60, 'cluster-shared')).toBe(20);
  });
});
