/* eslint-disable @typescript-eslint/no-explicit-any, @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-return --
   the assertions read parsed JSON and protobuf answers dynamically */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RlsClient, call, scratch, startTestServer, writeRules, type TestServer } from './support.js';
import { clearOfWindowEnd } from '../../../test/wait-for.js';

// An envoyproxy/ratelimit configuration file, loaded unchanged.
const ENVOY = `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`;

const EDGE = `
domain: edge
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bar
        rate_limit:
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        rate_limit:
          unit: minute
          requests_per_unit: 3
  - key: route
    value: read
    descriptors:
      - key: user
        value: alice
        rate_limit:
          name: specific_limit
          unit: minute
          requests_per_unit: 1
  - key: route
    value: items
    descriptors:
      - key: user
        value: alice
        rate_limit:
          replaces:
            - name: specific_limit
          unit: minute
          requests_per_unit: 3
  - key: bot
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: internal
    rate_limit:
      unlimited: true
`;

const NATIVE = `
resources:
  api:x: { limits: { algorithm: fixed-window, limit: 1 } }
`;

const entries = (...kv: [string, string][]) => ({ entries: kv.map(([key, value]) => ({ key, value })) });

describe('Envoy RateLimitService over gRPC', () => {
  const tmp = scratch();
  let server: TestServer;
  let client: RlsClient;
  const ask = (domain: string, descriptors: object[], hits_addend = 0) =>
    client.shouldRateLimit({ domain, descriptors, hits_addend });

  beforeAll(async () => {
    const files = [
      writeRules(tmp.dir, NATIVE, 'native.yaml'),
      writeRules(tmp.dir, ENVOY, 'mongo.yaml'),
      writeRules(tmp.dir, EDGE, 'edge.yaml'),
    ];
    server = await startTestServer({ rules: files, maxBodyBytes: '2048' });
    client = new RlsClient(`127.0.0.1:${server.grpcPort}`);
  });
  afterAll(async () => {
    client?.close();
    await server?.close();
    tmp.remove();
  });

  it('serves domains from envoyproxy/ratelimit files next to native resources', async () => {
    const r = await ask('mongo_cps', [entries(['database', 'users'])]);
    expect(r.overall_code).toBe('OK');
    expect(r.statuses[0]).toMatchObject({
      code: 'OK',
      current_limit: { requests_per_unit: 500, unit: 'SECOND', name: '' },
      limit_remaining: 499,
    });
    expect(
      Number(r.statuses[0].duration_until_reset.seconds) * 1000 + r.statuses[0].duration_until_reset.nanos / 1e6,
    ).toBeLessThanOrEqual(1000);
    expect((await call(server.url, '/v1/check', { resource: 'api:x' })).json.allowed).toBe(true);
  });

  it('matches nested descriptors and answers per descriptor', async () => {
    const bar = entries(['source_cluster', 'proxy'], ['destination_cluster', 'bar']);
    const foo = entries(['source_cluster', 'proxy'], ['destination_cluster', 'foo']);
    const first = await ask('edge', [bar, foo, entries(['unknown', 'x'])]);
    expect(first.overall_code).toBe('OK');
    expect(first.statuses.map((s: any) => [s.code, s.current_limit?.requests_per_unit ?? null, s.limit_remaining])).toEqual([
      ['OK', 2, 1],
      ['OK', 3, 2],
      ['OK', null, 0],
    ]);
    await ask('edge', [bar]);
    const over = await ask('edge', [bar, foo]);
    expect(over.overall_code).toBe('OVER_LIMIT');
    expect(over.statuses.map((s: any) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
    // The refused request charged nothing: foo still has 2 of its 3.
    expect((await ask('edge', [foo])).statuses[0].limit_remaining).toBe(1);
  });

  it('applies replaces: the named limit is dropped when a replacing one matches', async () => {
    const read = entries(['route', 'read'], ['user', 'alice']);
    const items = entries(['route', 'items'], ['user', 'alice']);
    for (let i = 0; i < 3; i++) {
      const r = await ask('edge', [read, items]);
      expect(r.overall_code).toBe('OK');
      expect(r.statuses[0]).toMatchObject({ code: 'OK', current_limit: null, limit_remaining: 0 });
      expect(r.statuses[1]).toMatchObject({ code: 'OK', limit_remaining: 2 - i });
    }
    expect((await ask('edge', [read, items])).overall_code).toBe('OVER_LIMIT');
    // Without the replacing descriptor, the specific limit (1 a minute) applies.
    expect((await ask('edge', [read])).overall_code).toBe('OK');
    expect((await ask('edge', [read])).overall_code).toBe('OVER_LIMIT');
  });

  it('counts shadow-mode descriptors without refusing, and passes unlimited ones', async () => {
    for (let i = 0; i < 3; i++) {
      const r = await ask('edge', [entries(['bot', 'crawler']), entries(['internal', 'svc'])]);
      expect(r.overall_code).toBe('OK');
      expect(r.statuses[1]).toMatchObject({ code: 'OK', limit_remaining: 4294967295 });
      if (i > 0) expect(r.statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 0 });
    }
    const metrics = (await call(server.url, '/metrics')).json as string;
    const shadowDenied = [
      ...metrics.matchAll(
        /^sluice_decisions_total\{resource="envoy:edge.bot",mode="try",outcome="shadow_denied",source="\w+"\} (\d+)$/gm,
      ),
    ];
    expect(shadowDenied.reduce((n, m) => n + Number(m[1]), 0)).toBe(2);
  });

  it('charges hits_addend and applies limit overrides from the request', async () => {
    // Both charges in one window of a second: the embedded store (in this process) runs windows
    // from multiples of a second of its monotonic clock, and past an end the count starts again.
    await clearOfWindowEnd(1000, 300, () => performance.now());
    const d = { ...entries(['database', 'default']), hits_addend: { value: 100 } };
    expect((await ask('mongo_cps', [d])).statuses[0].limit_remaining).toBe(400);
    expect((await ask('mongo_cps', [entries(['database', 'default'])], 50)).statuses[0].limit_remaining).toBe(350);
    const override = { ...entries(['anything', 'v']), limit: { requests_per_unit: 1, unit: 'HOUR' } };
    const r = await ask('edge', [override]);
    expect(r.statuses[0]).toMatchObject({ code: 'OK', current_limit: { requests_per_unit: 1, unit: 'HOUR' } });
    expect((await ask('edge', [override])).overall_code).toBe('OVER_LIMIT');
  });

  it('answers an unknown domain OK', async () => {
    const r = await ask('nobody', [entries(['a', 'b'])]);
    expect(r.overall_code).toBe('OK');
    expect(r.statuses).toHaveLength(1);
  });

  it('answers bad requests INVALID_ARGUMENT with the Sluice code', async () => {
    expect(await ask('', [entries(['a', 'b'])])).toMatchObject({ error: { code: 3, sluice: 'SLUICE_ERR_INVALID_REQUEST' } });
    expect(await ask('edge', [])).toMatchObject({ error: { code: 3, sluice: 'SLUICE_ERR_INVALID_REQUEST' } });
    expect(await ask('edge', [{ entries: [] }])).toMatchObject({ error: { code: 3, sluice: 'SLUICE_ERR_INVALID_REQUEST' } });
    expect(await ask('edge', [{ ...entries(['a', 'b']), limit: { requests_per_unit: 0, unit: 'SECOND' } }])).toMatchObject({
      error: { code: 3 },
    });
    expect(await client.raw(Buffer.from([0xff, 0xff, 0xff, 0x07, 0x01, 0x02]))).toMatchObject({
      error: { code: 3, sluice: 'SLUICE_ERR_MALFORMED_BODY' },
    });
    expect(await ask('edge', [entries(['k', 'v'.repeat(4096)])])).toMatchObject({ error: { code: 8 } });
    // Still deciding afterwards.
    expect((await ask('mongo_cps', [entries(['database', 'users'])])).overall_code).toBe('OK');
    const metrics = (await call(server.url, '/metrics')).json as string;
    expect(metrics).toMatch(/^sluice_grpc_requests_total\{method="ShouldRateLimit",code="3"\} [1-9]/m);
  });
});
