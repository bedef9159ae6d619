/**
 * `/metrics` of a real `sluice serve`, on the embedded store and on the tests' Redis
 * (SLUICE_REDIS_URL), after checks over HTTP and Envoy calls over gRPC: `promtool check metrics`
 * (the Prometheus package's linter) finds nothing to say of any `sluice_*` family, and the
 * duration histograms and the build information carry what the traffic made, under the labels
 * the documentation gives. Needs `promtool` on PATH (Debian: the `prometheus` package); without
 * it the promtool check is skipped, with a message saying so.
 */
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../../../test/env.js';
import { deleteRedisKeys, storeFlags, type TestStore } from '../../../test/sluice-serve.js';
import { RlsClient, call, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

const { version } = createRequire(import.meta.url)('../package.json') as { version: string };

const RULES = `
resources:
  api: { limits: { algorithm: fixed-window, limit: 3, windowMs: 3600000 } }
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: { unit: hour, requests_per_unit: 2 }
`;

const promtool = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
const PROMTOOL = promtool.error === undefined && promtool.status === 0;
if (!PROMTOOL) {
  console.warn('promtool is not installed (Debian: apt-get install prometheus): the promtool check of /metrics is skipped');
}

/** `promtool check metrics` of `text`: its findings, one line each (`<family> <what is wrong>`). */
function promtoolFindings(text: string): string[] {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (r.error !== undefined) throw r.error;
  return `${r.stdout}\n${r.stderr}`.split('\n').filter((l) => l.trim() !== '');
}

/** The value of one sample line of the exposition (undefined when absent). */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** The label sets of a family's samples named `name` (e.g. `x_count`), as written. */
function labelSets(text: string, name: string): string[] {
  return [...text.matchAll(new RegExp(`^${name}\\{(.*)\\} \\S+$`, 'gm'))].map((m) => m[1]!);
}

describe.each<TestStore>(['memory', 'redis'])('/metrics of sluice serve on the %s store', (store) => {
  const tmp = scratch();
  const prefix = randomPrefix('metrics');
  let server: ServerProcess;
  let text: string;

  beforeAll(async () => {
    server = await spawnServer(['--rules', writeRules(tmp.dir, RULES), ...storeFlags(store, prefix)]);
    // Four checks of one key over HTTP (the fourth is denied), one with a bad resource (404).
    for (let i = 0; i < 4; i++) await call(server.url, '/v1/check', { resource: 'api', key: 'k' });
    expect((await call(server.url, '/v1/check', { resource: 'nope', key: 'k' })).status).toBe(404);
    const rls = new RlsClient(`127.0.0.1:${server.grpcPort}`);
    try {
      const codes: string[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await rls.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'u1' }] }] });
        codes.push(String((r as { overall_code?: unknown }).overall_code));
      }
      expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    } finally {
      rls.close();
    }
    text = (await call(server.url, '/metrics')).json as string;
  });

  afterAll(async () => {
    await server?.stop();
    tmp.remove();
    if (store === 'redis') await deleteRedisKeys(prefix);
  });

  it.skipIf(!PROMTOOL)('passes promtool check metrics for every sluice_* family', () => {
    const findings = promtoolFindings(text);
    expect(findings.filter((l) => l.startsWith('sluice_'))).toEqual([]);
  });

  it('times decisions by resource and source, HTTP requests by route and method, gRPC calls by method', () => {
    const decisions = labelSets(text, 'sluice_decision_duration_seconds_count');
    expect(decisions).toContain('resource="api",source="store"');
    expect(decisions.some((l) => /^resource="envoy:edge[^"]*",source="store"$/.test(l))).toBe(true);
    // Every decision is timed: as many as were counted.
    const counted = [...text.matchAll(/^sluice_decisions_total\{resource="api",[^}]*\} (\S+)$/gm)].reduce(
      (n, m) => n + Number(m[1]),
      0,
    );
    const timed = labelSets(text, 'sluice_decision_duration_seconds_count')
      .filter((l) => l.startsWith('resource="api"'))
      .reduce((n, l) => n + sample(text, `sluice_decision_duration_seconds_count{${l}}`)!, 0);
    expect(counted).toBe(4);
    expect(timed).toBe(4);
    expect(sample(text, 'sluice_http_request_duration_seconds_count{route="/v1/check",method="POST"}')).toBe(5);
    expect(sample(text, 'sluice_http_request_duration_seconds_bucket{le="+Inf",route="/v1/check",method="POST"}')).toBe(5);
    expect(sample(text, 'sluice_grpc_request_duration_seconds_count{method="ShouldRateLimit"}')).toBe(3);
    expect(sample(text, 'sluice_grpc_request_duration_seconds_sum{method="ShouldRateLimit"}')).toBeGreaterThan(0);
    // The buckets of the documentation, 50 µs .. 2.5 s.
    expect(labelSets(text, 'sluice_grpc_request_duration_seconds_bucket').map((l) => /le="([^"]+)"/.exec(l)![1])).toEqual([
      '0.00005',
      '0.0001',
      '0.00025',
      '0.0005',
      '0.001',
      '0.0025',
      '0.005',
      '0.01',
      '0.025',
      '0.05',
      '0.1',
      '0.25',
      '0.5',
      '1',
      '2.5',
      '+Inf',
    ]);
  });

  it(`times the store's round trips ${store === 'redis' ? 'by operation' : '(none: the embedded store makes none)'}`, () => {
    const calls = labelSets(text, 'sluice_store_call_duration_seconds_count');
    if (store === 'memory') {
      expect(calls).toEqual([]);
    } else {
      expect(calls).toContain('operation="consume"');
      expect(
        calls.every((l) =>
          /^operation="(consume|reserve|adjust|renew|release|book|cancel|ping|outcomes|outcomeTotals)"$/.test(l),
        ),
      ).toBe(true);
      expect(sample(text, 'sluice_store_call_duration_seconds_count{operation="consume"}')).toBeGreaterThanOrEqual(1);
    }
  });

  it('says which build it is, in base units throughout', () => {
    expect(text.match(/^sluice_build_info\{.*$/gm)).toEqual([
      `sluice_build_info{version="${version}",node_version="${process.version}"} 1`,
    ]);
    expect(text).toMatch(/^sluice_rollout_ratio 0$/m);
    expect(text).not.toMatch(/^sluice_\w*(_ms|_percent)\b/m);
  });
});
