/* eslint-disable @typescript-eslint/no-explicit-any, @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-return --
   the assertions read parsed protobuf and JSON answers dynamically */
/**
 * Envoy limit overrides against `sluice serve` (the built CLI, so `npm run build` first), on the
 * embedded store and on Redis: a flood of distinct overrides never wedges the service (new
 * overrides are still decided, a descriptor over its limit still answers OVER_LIMIT, idle ones
 * make room); the largest `requests_per_unit` is capped, not refused; the HTTP API never
 * reaches an override's resource.
 */
import { limiterResourceName } from '@sluice/server';
import { compileRules } from '@sluice/rules';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RlsClient, call, eventually } from '../../packages/server/test/support.js';
import { randomPrefix } from '../env.js';
import { deleteRedisKeys, rulesFile, spawnSluice, storeFlags, type Serve, type TestStore } from '../sluice-serve.js';

const RULES = `
domain: abuse
descriptors:
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: route
    value: hot
    rate_limit: { unit: hour, requests_per_unit: 1 }
`;

const FLOOD = 999;

const entries = (key: string, value: string) => ({ entries: [{ key, value }] });
const override = (key: string, value: string, rpu: number) => ({
  ...entries(key, value),
  limit: { requests_per_unit: rpu, unit: 'HOUR' },
});

/** A `sluice serve` of this file's tests: the process, and on Redis the prefix of its keys. */
interface Server {
  readonly serve: Serve;
  /** Stops the process and deletes its keys from Redis. */
  stop(): Promise<void>;
}

/** `sluice serve` with the rules above, on `store`, with override settings given as variables. */
async function serve(rules: string, store: TestStore, env: Record<string, string> = {}): Promise<Server> {
  const prefix = randomPrefix('abuse-envoy');
  const args = ['--rules', rules, '--port', '0', '--grpc-port', '0', ...storeFlags(store, prefix)];
  const s = await spawnSluice(args, { SLUICE_SHUTDOWN_GRACE_MS: '500', ...env });
  return {
    serve: s,
    async stop() {
      await s.stop();
      if (store === 'redis') await deleteRedisKeys(prefix);
    },
  };
}

/** Sends `n` requests, `width` at a time; resolves to every answer in order. */
async function flood(client: RlsClient, n: number, request: (i: number) => object, width = 50): Promise<any[]> {
  const answers: any[] = new Array(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) {
        const i = next++;
        answers[i] = await client.shouldRateLimit(request(i));
      }
    }),
  );
  return answers;
}

/** Answers that failed whole (a gRPC error instead of a decision), by Sluice code. */
function failures(answers: readonly any[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const a of answers) if (a?.error) out[a.error.sluice ?? a.error.code] = (out[a.error.sluice ?? a.error.code] ?? 0) + 1;
  return out;
}

describe.each<TestStore>(['memory', 'redis'])('Envoy limit overrides under abuse (%s store)', (store) => {
  const rules = rulesFile(RULES);
  let server: Server;
  let client: RlsClient;
  const ask = (descriptors: object[]) => client.shouldRateLimit({ domain: 'abuse', descriptors, hits_addend: 0 });

  beforeAll(async () => {
    // The defaults: 1000 overrides at once, 100 new a minute, dropped after a minute unused.
    server = await serve(rules.path, store);
    client = new RlsClient(`127.0.0.1:${server.serve.grpcPort}`);
  });
  afterAll(async () => {
    client?.close();
    await server?.stop();
    rules.remove();
  });

  // The flood spends the rate of new overrides: the tests that need theirs admitted come first.
  it('caps requests_per_unit of 4294967295 at the largest limit instead of refusing it', async () => {
    const r = await ask([override('big', 'x', 4294967295)]);
    expect(r.error).toBeUndefined();
    expect(r.overall_code).toBe('OK');
    expect(r.statuses[0]).toMatchObject({
      code: 'OK',
      current_limit: { requests_per_unit: 1_000_000_000, unit: 'HOUR' },
      limit_remaining: 999_999_999,
    });
  });

  it('never serves an override resource over HTTP /v1/check', async () => {
    const d = override('tenant', 'http', 3);
    // The resource the override counts under, as the service names it.
    const domain = compileRules(RULES, { file: 'rules.yaml' }).domains.abuse!;
    const m = domain.match(d.entries, { requestsPerUnit: 3, unit: 'hour' })!;
    const r = await ask([d]);
    expect(r.statuses[0]).toMatchObject({ code: 'OK', current_limit: { requests_per_unit: 3 } });
    const check = await call(server.serve.url, '/v1/check', { resource: limiterResourceName(m.resource), key: m.key });
    expect(check.status).toBe(404);
    expect(check.json.error.code).toBe('SLUICE_ERR_UNKNOWN_RESOURCE');
    // The configured limit is a resource of the active version: served.
    expect((await call(server.serve.url, '/v1/check', { resource: 'envoy:abuse.tenant', key: 'k' })).status).toBe(200);
  });
  it('still decides new overrides, and a descriptor over its limit, after 999 distinct overrides', async () => {
    const answers = await flood(client, FLOOD, (i) => ({
      domain: 'abuse',
      descriptors: [override('flood', 'x', i + 1)],
      hits_addend: 0,
    }));
    expect(failures(answers)).toEqual({});
    // Past the rate of new overrides, the flood (no configured limit) is refused, not passed.
    const counted = answers.filter((a) => a.statuses[0].code === 'OK').length;
    expect(counted).toBeGreaterThan(0);
    expect(counted).toBeLessThan(FLOOD);

    // New overrides on a configured descriptor: decided every time, never failing whole.
    const fresh = await flood(client, 20, (i) => ({
      domain: 'abuse',
      descriptors: [override('tenant', `t${i}`, 5000 + i)],
      hits_addend: 0,
    }));
    expect(failures(fresh)).toEqual({});
    for (const a of fresh) {
      expect(a.overall_code).toBe('OK');
      expect(a.statuses[0].current_limit.unit).toBe('HOUR');
    }

    // A descriptor over its limit answers OVER_LIMIT overall next to a new override.
    expect((await ask([entries('route', 'hot')])).overall_code).toBe('OK');
    const over = await ask([override('tenant', 'late', 7777), entries('route', 'hot')]);
    expect(over.error).toBeUndefined();
    expect(over.overall_code).toBe('OVER_LIMIT');
    expect(over.statuses.map((s: any) => s.code)).toEqual(['OK', 'OVER_LIMIT']);
  });
});

describe.each<TestStore>(['memory', 'redis'])('idle Envoy limit overrides make room (%s store)', (store) => {
  const rules = rulesFile(RULES);
  let server: Server;
  let client: RlsClient;

  beforeAll(async () => {
    server = await serve(rules.path, store, {
      SLUICE_MAX_OVERRIDES: '10',
      SLUICE_OVERRIDE_RATE: '6000',
      SLUICE_OVERRIDE_IDLE_MS: '1000',
    });
    client = new RlsClient(`127.0.0.1:${server.serve.grpcPort}`);
  });
  afterAll(async () => {
    client?.close();
    await server?.stop();
    rules.remove();
  });

  it('admits a new override once the flood that filled the table is idle', async () => {
    const answers = await flood(client, FLOOD, (i) => ({
      domain: 'abuse',
      descriptors: [override('flood', 'x', i + 1)],
      hits_addend: 0,
    }));
    expect(failures(answers)).toEqual({});
    // A new override counts under its own limit again once idle ones made room.
    let rpu = 100_000;
    await eventually(
      async () => {
        const r = await client.shouldRateLimit({ domain: 'abuse', descriptors: [override('flood', 'y', ++rpu)], hits_addend: 0 });
        expect(r.error).toBeUndefined();
        return r.statuses[0].code === 'OK' && r.statuses[0].current_limit.requests_per_unit === rpu;
      },
      30_000,
      200,
    );
  });
});
