/** RedisRuleStore against real standalone Redis and Redis Cluster. */
import { readFileSync } from 'node:fs';
import { Cluster, Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { RedisRuleStore, isRulesError, type RedisRuleStoreOptions } from '../src/index.js';
import { randomPrefix, redisClusterNodes, redisUrl } from '../../../test/env.js';
import { nextVersion, rejection } from './store-helpers.js';

const V1 = 'resources:\n  api: { limits: { algorithm: gcra, limit: 100 } }\n';
const V2 = 'resources:\n  api: { limits: { algorithm: gcra, limit: 200 } }\n';
const V3 = 'domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: { unit: second, requests_per_unit: 5 }\n';
const who = { author: 'ana', reason: 'integration test' };

const APPLY_LUA = readFileSync(new URL('../lua/apply.lua', import.meta.url), 'utf8');

function suite(name: string, connect: () => Redis | Cluster) {
  describe(name, () => {
    const client = connect();
    const stores: RedisRuleStore[] = [];
    const prefixes: string[] = [];
    const open = (options: Partial<RedisRuleStoreOptions> & { prefix: string }) => {
      const s = new RedisRuleStore({ client, ...options });
      stores.push(s);
      return s;
    };
    const fresh = () => {
      const prefix = randomPrefix('rules');
      prefixes.push(prefix);
      return prefix;
    };
    const keys = (prefix: string) => ['seq', 'current', 'meta', 'source', 'index'].map((k) => `${prefix}{rules}:${k}`);

    afterAll(async () => {
      await Promise.all(stores.map((s) => s.close()));
      for (const p of prefixes) await client.del(...keys(p));
      await client.quit();
    });

    it('records changes as numbered versions stamped with Redis time', async () => {
      const prefix = fresh();
      const store = open({ prefix });
      expect(await store.current()).toBeUndefined();
      const before = Date.now();
      const v1 = await store.apply(V1, who);
      const v2 = await store.apply(V2, { author: 'bo', reason: 'double it', file: 'api.yaml' });
      expect([v1.version, v2.version]).toEqual([1, 2]);
      expect(Math.abs(Date.parse(v1.createdAt) - before)).toBeLessThan(60_000);
      // A second instance (another process) reads the same versions.
      const other = open({ prefix });
      const current = (await other.current())!;
      expect(current).toMatchObject({ version: 2, author: 'bo', reason: 'double it', file: 'api.yaml', source: V2 });
      expect(current.ruleSet.resources.api!.limits[0]!.limit).toBe(200);
      expect(current.hash).toBe(v2.hash);
      expect((await other.get(1)).createdAt).toBe(v1.createdAt);
      expect((await other.history()).map((m) => [m.version, m.author])).toEqual([
        [2, 'bo'],
        [1, 'ana'],
      ]);
    });

    it('never records invalid text', async () => {
      const prefix = fresh();
      const store = open({ prefix });
      await store.apply(V1, who);
      const e = await rejection(store.apply('domain: edge\ndescriptors:\n  - value: x\n', { ...who, file: 'edge.yaml' }));
      expect(e.message).toBe('edge.yaml: descriptors[0].key: descriptor has empty key');
      expect((await store.history()).map((m) => m.version)).toEqual([1]);
    });

    it('diffs and rolls back', async () => {
      const prefix = fresh();
      const store = open({ prefix });
      await store.apply(V1, who);
      await store.apply(V3, { ...who, file: 'edge.yaml' });
      const d = await store.diff(1, 2);
      expect(d.resources.removed).toEqual(['api']);
      expect(d.domains.added).toEqual(['edge']);
      expect(d.text.split('\n').slice(0, 2)).toEqual(['--- v1/rules.yaml', '+++ v2/edge.yaml']);
      const v3 = await store.rollback(1, { author: 'oncall', reason: 'edge limits too tight' });
      expect(v3).toMatchObject({ version: 3, rolledBackFrom: 1, source: V1, file: 'rules.yaml' });
      expect((await open({ prefix }).get(3)).rolledBackFrom).toBe(1);
    });

    it('applies only on the expected version', async () => {
      const prefix = fresh();
      const a = open({ prefix });
      const b = open({ prefix });
      await a.apply(V1, { ...who, expectedVersion: 0 });
      await b.apply(V2, { ...who, expectedVersion: 1 });
      const e = await rejection(a.apply(V3, { ...who, expectedVersion: 1 }));
      expect(isRulesError(e, 'SLUICE_ERR_RULE_CONFLICT')).toBe(true);
      expect((e as { version?: number }).version).toBe(2);
      expect((await a.current())!.version).toBe(2);
    });

    it('numbers concurrent changes from several clients without gaps or repeats', async () => {
      const prefix = fresh();
      const a = open({ prefix });
      const b = open({ prefix });
      const made = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).apply(i % 3 ? V1 : V2, who)));
      expect(made.map((v) => v.version).sort((x, y) => x - y)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    });

    it('keeps at most maxVersions', async () => {
      const prefix = fresh();
      const store = open({ prefix, maxVersions: 2 });
      for (const t of [V1, V2, V1]) await store.apply(t, who);
      expect((await store.history({ limit: 2 })).map((m) => m.version)).toEqual([3, 2]);
      expect(await rejection(open({ prefix }).get(1))).toMatchObject({ code: 'SLUICE_ERR_RULE_VERSION_NOT_FOUND' });
      expect(await client.zcard(`${prefix}{rules}:index`)).toBe(2);
      expect(await client.hlen(`${prefix}{rules}:source`)).toBe(2);
    });

    it('tells watchers of changes by pub/sub', async () => {
      const prefix = fresh();
      const writer = open({ prefix });
      // Polling is made too slow to matter: only the change message can deliver in time.
      const watcher = open({ prefix, pollIntervalMs: 60_000 });
      await writer.apply(V1, who);
      expect((await nextVersion(watcher, 0)).version).toBe(1);
      const next = nextVersion(watcher, 1);
      await writer.apply(V2, who);
      const v2 = await next;
      expect(v2.version).toBe(2);
      expect(v2.ruleSet.resources.api!.limits[0]!.limit).toBe(200);
    });

    it('finds changes by polling when a message is missed', async () => {
      const prefix = fresh();
      const watcher = open({ prefix, pollIntervalMs: 100 });
      const next = nextVersion(watcher, 0);
      // A change announced on another channel: the watcher can only find it by polling.
      const record = JSON.stringify({ author: 'x', reason: 'y', hash: 'h', file: 'rules.yaml' });
      const reply = await client.eval(APPLY_LUA, 5, ...keys(prefix), '1', '', record, V1, '10', `${prefix}elsewhere`);
      expect((reply as number[])[0]).toBe(0);
      const v = await next;
      expect(v).toMatchObject({ version: 1, author: 'x', source: V1 });
    });

    it('rejects script arguments it does not understand', async () => {
      const prefix = fresh();
      const reply = await client.eval(APPLY_LUA, 5, ...keys(prefix), '2', '', '{"a":1}', V1, '10', 'c');
      expect(reply).toEqual([2, 'protocol 2, this script speaks 1']);
      expect(await client.exists(...keys(prefix))).toBe(0);
    });
  });
}

suite('standalone Redis', () => new Redis(redisUrl()));
suite('Redis Cluster', () => new Cluster(redisClusterNodes()));

describe('owned connections', () => {
  it('connects by url and closes what it opened', async () => {
    const prefix = randomPrefix('rules');
    const store = new RedisRuleStore({ url: redisUrl(), prefix });
    const v = await store.apply(V1, who);
    expect(v.version).toBe(1);
    await store.close();
    const client = new Redis(redisUrl());
    await client.del(...['seq', 'current', 'meta', 'source', 'index'].map((k) => `${prefix}{rules}:${k}`));
    await client.quit();
  });

  it('connects to a cluster by seed nodes', async () => {
    const prefix = randomPrefix('rules');
    const nodes = redisClusterNodes().map((n) => `${n.host}:${n.port}`);
    const store = new RedisRuleStore({ clusterNodes: nodes, prefix });
    expect((await store.apply(V1, who)).version).toBe(1);
    expect((await store.current())!.source).toBe(V1);
    await store.close();
    const client = new Cluster(redisClusterNodes());
    await client.del(...['seq', 'current', 'meta', 'source', 'index'].map((k) => `${prefix}{rules}:${k}`));
    await client.quit();
  });

  it('fails with a typed error when Redis cannot be reached', async () => {
    const store = new RedisRuleStore({ url: 'redis://127.0.0.1:1', prefix: 'x:', commandTimeoutMs: 300 });
    const e = await rejection(store.apply(V1, who));
    expect(isRulesError(e, 'SLUICE_ERR_RULE_STORE_UNAVAILABLE')).toBe(true);
    await store.close();
  });

  it('takes exactly one connection option', () => {
    expect(() => new RedisRuleStore({ prefix: 'x:' })).toThrow('give exactly one of client, url and clusterNodes');
  });
});
