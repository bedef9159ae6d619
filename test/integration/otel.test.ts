/**
 * OpenTelemetry end to end: a real `sluice serve` (the built CLI, on the tests' Redis) exports
 * over OTLP to a real OpenTelemetry Collector (scripts/otelcol.sh builds it; each test starts its
 * own), which forwards what it accepted to a sink in the test. Traffic over HTTP and gRPC; the
 * test then reads what arrived: the families of /metrics under the same names and types (the
 * decision histogram with the same bounds and a count matching the decisions made), the
 * resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, decision-batch spans and their
 * store-call children. With OTel off, not one OpenTelemetry module is loaded (a module hook
 * records them) and nothing is sent; a bad value stops the start with exit 2; a collector that
 * is away costs no decision and is logged once and counted.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DURATION_BUCKETS } from '@sluice/core/metrics';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RlsClient, eventually } from '../../packages/server/test/support.js';
import { redisUrl } from '../env.js';
import { attributesOf, startCollector, type Collector, type OtlpMetric } from '../otelcol.js';
import { freePort } from '../prometheus.js';
import { SLUICE_BIN, childEnv, deleteRedisKeys, metric, rulesFile, spawnSluice, storeFlags } from '../sluice-serve.js';
import { randomPrefix } from '../env.js';
import { clearOfWindowEnd } from '../wait-for.js';

const RULES = `
resources:
  api:orders:
    limits: { algorithm: fixed-window, limit: 3, windowMs: 60000 }
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: { unit: minute, requests_per_unit: 2 }
`;
const WATCH_IMPORTS = fileURLToPath(new URL('./fixtures/otel-watch-imports.mjs', import.meta.url));
const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const CALLER_SPAN = 'b7ad6b7169203331';

let collector: Collector;
let rules: ReturnType<typeof rulesFile>;
let scratch: string;
const prefixes: string[] = [];

beforeAll(async () => {
  collector = await startCollector();
  rules = rulesFile(RULES);
  scratch = mkdtempSync(join(tmpdir(), 'sluice-otel-'));
});

afterAll(async () => {
  await collector?.stop();
  rules?.remove();
  if (scratch !== undefined) rmSync(scratch, { recursive: true, force: true });
  for (const p of prefixes) await deleteRedisKeys(p);
});

/** `sluice serve` on Redis with `env`, its OpenTelemetry imports recorded in `importLog`. */
function serve(env: Record<string, string>, importLog: string) {
  const prefix = randomPrefix('otel');
  prefixes.push(prefix);
  return spawnSluice(['--rules', rules.path, '--port', '0', '--grpc-port', '0', ...storeFlags('redis', prefix)], {
    SLUICE_SHUTDOWN_GRACE_MS: '500',
    NODE_OPTIONS: `--import ${WATCH_IMPORTS}`,
    SLUICE_TEST_IMPORT_LOG: importLog,
    ...env,
  });
}

async function check(url: string, body: object, headers: Record<string, string> = {}) {
  const res = await fetch(new URL('/v1/check', url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return (await res.json()) as { allowed?: boolean; results?: unknown[] };
}

/** The families of a Prometheus text (`# TYPE name type`). */
function families(text: string): Map<string, string> {
  return new Map(
    text
      .split('\n')
      .filter((l) => l.startsWith('# TYPE '))
      .map((l) => l.slice('# TYPE '.length).split(' ') as [string, string]),
  );
}

function kindOf(m: OtlpMetric): string {
  if (m.sum !== undefined) return m.sum.isMonotonic === true ? 'counter' : 'updown';
  if (m.gauge !== undefined) return 'gauge';
  if (m.histogram !== undefined) return 'histogram';
  return 'other';
}

const total = (points: { asDouble?: number; asInt?: string }[] | undefined) =>
  (points ?? []).reduce((n, p) => n + (p.asDouble ?? Number(p.asInt ?? 0)), 0);

describe('OpenTelemetry export of sluice serve', () => {
  it('exports the families of /metrics and spans of HTTP and gRPC decision batches to a collector', async () => {
    const importLog = join(scratch, 'on.log');
    const s = await serve(
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
        OTEL_METRIC_EXPORT_INTERVAL: '500',
        OTEL_SERVICE_NAME: 'edge-limits',
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=test,team=rate%20control',
      },
      importLog,
    );
    const started = s.logs.map((l) => JSON.parse(l.startsWith('{') ? l : '{}') as Record<string, unknown>);
    expect(started.find((e) => e.msg === 'OpenTelemetry export on')).toMatchObject({
      service: 'edge-limits',
      metrics: `${collector.endpoint}/v1/metrics (http/protobuf, every 500 ms)`,
      traces: `${collector.endpoint}/v1/traces (http/protobuf, sampler parentbased_always_on)`,
    });
    // Every counted call in one window of a minute (Redis' windows run from multiples of a minute
    // of this machine's clock): across a window's end, the fourth check or third call would pass.
    await clearOfWindowEnd(60_000, 5_000);
    // HTTP: four single checks (3 a minute: the fourth is denied), in the caller's trace; one batch of two.
    const traceparent = `00-${TRACE_ID}-${CALLER_SPAN}-01`;
    const singles = [];
    for (let i = 0; i < 4; i++)
      singles.push((await check(s.url, { resource: 'api:orders', key: 'u1' }, { traceparent })).allowed);
    expect(singles).toEqual([true, true, true, false]);
    const batch = await check(s.url, {
      items: [
        { resource: 'api:orders', key: 'u2' },
        { resource: 'nope', key: 'x' },
      ],
    });
    expect(batch.results).toHaveLength(2);
    // gRPC (Envoy's API): 2 a minute per address, so the third is OVER_LIMIT.
    const rls = new RlsClient(`127.0.0.1:${s.grpcPort}`);
    const codes: string[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const r = await rls.shouldRateLimit({
          domain: 'edge',
          descriptors: [{ entries: [{ key: 'remote_address', value: '10.0.0.1' }] }],
        });
        codes.push(r.overall_code as string);
      }
    } finally {
      rls.close();
    }
    expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    const text = await (await fetch(new URL('/metrics', s.url))).text();
    const decisions = 4 + 1 + 3;
    const exposed = families(text);
    // The last export is written at shutdown (SIGTERM flushes), after every decision.
    expect(await s.stop()).toBe(0);

    const exports = collector.metricExports();
    expect(exports.length).toBeGreaterThan(0);
    const last = exports.at(-1)!;
    expect(attributesOf(last.resource?.attributes)).toMatchObject({
      'service.name': 'edge-limits',
      'deployment.environment.name': 'test',
      team: 'rate control',
      'telemetry.sdk.language': 'nodejs',
    });
    const byName = new Map(last.items.map((m) => [m.name, m]));
    // Every family of /metrics, under its name and of its type (prom-client makes no summaries here).
    expect(exposed.size).toBeGreaterThan(30);
    for (const [name, type] of exposed) {
      expect({ name, kind: byName.has(name) ? kindOf(byName.get(name)!) : 'missing' }).toEqual({ name, kind: type });
    }
    const decided = byName.get('sluice_decisions_total')!;
    expect(decided.sum?.aggregationTemporality).toBe(2); // cumulative
    expect(total(decided.sum?.dataPoints)).toBe(decisions);
    const durations = byName.get('sluice_decision_duration_seconds')!;
    expect(durations.unit).toBe('s');
    const points = durations.histogram?.dataPoints ?? [];
    for (const p of points) expect(p.explicitBounds).toEqual([...DURATION_BUCKETS]);
    expect(points.reduce((n, p) => n + Number(p.count), 0)).toBe(decisions);
    const build = byName.get('sluice_build_info')!;
    expect(build.gauge?.dataPoints?.map((p) => attributesOf(p.attributes).version)).toEqual([
      expect.stringMatching(/^\d+\.\d+\.\d+/),
    ]);

    const spans = collector.spans().flatMap((r) => r.items);
    expect(attributesOf(collector.spans()[0]?.resource?.attributes)['service.name']).toBe('edge-limits');
    const checks = spans.filter((sp) => sp.name === 'sluice check');
    expect(checks).toHaveLength(5);
    const traced = checks.filter((sp) => sp.traceId === TRACE_ID);
    expect(traced).toHaveLength(4);
    for (const sp of traced) expect(sp.parentSpanId).toBe(CALLER_SPAN);
    expect(traced.map((sp) => attributesOf(sp.attributes)['sluice.denied']).sort()).toEqual([0, 0, 0, 1]);
    const ofBatch = checks.find((sp) => sp.traceId !== TRACE_ID)!;
    expect(ofBatch.kind).toBe(2); // SERVER
    expect(attributesOf(ofBatch.attributes)).toMatchObject({
      'http.route': '/v1/check',
      'sluice.operation': 'check',
      'sluice.items': 2,
      'sluice.allowed': 1,
      'sluice.denied': 0,
      'sluice.resources': ['api:orders'],
      'sluice.decision.sources': ['store'],
    });
    const rlsSpans = spans.filter((sp) => sp.name === 'sluice ShouldRateLimit');
    expect(rlsSpans).toHaveLength(3);
    expect(rlsSpans.map((sp) => attributesOf(sp.attributes)['sluice.denied']).sort()).toEqual([0, 0, 1]);
    expect(attributesOf(rlsSpans[0]!.attributes)).toMatchObject({
      'rpc.system': 'grpc',
      'rpc.method': 'ShouldRateLimit',
      'sluice.domain': 'edge',
    });
    // Each decision's store call, a child of its batch, on the tests' Redis.
    const redis = new URL(redisUrl());
    const batchIds = new Set([...checks, ...rlsSpans].map((sp) => sp.spanId));
    const calls = spans.filter((sp) => sp.name === 'sluice.store consume');
    expect(calls).toHaveLength(decisions);
    for (const call of calls) {
      expect(call.kind).toBe(3); // CLIENT
      expect(batchIds.has(call.parentSpanId ?? '')).toBe(true);
      expect(attributesOf(call.attributes)).toMatchObject({
        'db.system.name': 'redis',
        'server.address': redis.hostname,
        'server.port': Number(redis.port),
        'sluice.store.outcome': 'ok',
      });
    }
    // The SDK was loaded (the hook sees imports: the test below can tell it was not).
    expect(readFileSync(importLog, 'utf8')).toContain('/@opentelemetry/sdk-metrics/');
  });

  it('with OpenTelemetry off loads none of it and sends nothing', async () => {
    const importLog = join(scratch, 'off.log');
    const before = collector.received.length;
    const s = await serve({}, importLog);
    expect((await check(s.url, { resource: 'api:orders', key: 'off' })).allowed).toBe(true);
    expect(s.logs.some((l) => l.includes('OpenTelemetry'))).toBe(false);
    expect(await s.stop()).toBe(0);
    expect(existsSync(importLog) ? readFileSync(importLog, 'utf8') : '').toBe('');
    expect(collector.received.length).toBe(before);
  });

  it('refuses a value it does not understand at start, with exit 2', async () => {
    const run = (env: Record<string, string>) =>
      new Promise<{ code: number | null; stderr: string }>((resolve) => {
        execFile(
          process.execPath,
          [SLUICE_BIN, 'serve', '--rules', rules.path, '--port', '0', '--grpc-port', 'off'],
          { env: { ...childEnv(), ...env }, timeout: 30_000 },
          (err, _stdout, stderr) => resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : null, stderr }),
        );
      });
    const grpc = await run({ OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' });
    expect(grpc.code).toBe(2);
    expect(grpc.stderr).toContain('sluice: OTEL_EXPORTER_OTLP_PROTOCOL: must be http/protobuf or http/json, got "grpc"');
    const exporter = await run({ OTEL_TRACES_EXPORTER: 'jaeger' });
    expect(exporter.code).toBe(2);
    expect(exporter.stderr).toContain('sluice: OTEL_TRACES_EXPORTER: must be otlp or none, got "jaeger"');
  });

  it('with the collector away, decisions go on; failed exports are logged once per interval and counted', async () => {
    const away = `http://127.0.0.1:${await freePort()}`;
    const s = await serve(
      { OTEL_EXPORTER_OTLP_ENDPOINT: away, OTEL_METRIC_EXPORT_INTERVAL: '200', OTEL_TRACES_EXPORTER: 'none' },
      join(scratch, 'away.log'),
    );
    try {
      const answers = [];
      for (let i = 0; i < 3; i++) answers.push((await check(s.url, { resource: 'api:orders', key: 'away' })).allowed);
      expect(answers).toEqual([true, true, true]);
      await eventually(async () => (await metric(s.url, 'sluice_warnings_total', 'event="otel_metrics_export_failed"')) >= 3);
      expect(s.logs.filter((l) => l.includes('OTLP export of metrics failed'))).toHaveLength(1);
    } finally {
      expect(await s.stop()).toBe(0);
    }
  });
});
