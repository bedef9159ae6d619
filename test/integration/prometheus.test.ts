/**
 * The monitoring kit against a real Prometheus (scripts/prometheus.sh provides it; this test
 * starts its own): deploy/prometheus/sluice-alerts.yaml passes `promtool check rules` and its unit
 * tests; then Prometheus scrapes a real `sluice serve` (the built CLI, on the tests' Redis through
 * a proxy the test can cut) and an aggregator every second, with the alert rules loaded, while
 * the test drives HTTP and gRPC traffic (allowed, denied, shadow) and causes the events some series
 * only appear on: a store outage (fallback decisions, 5xx answers, failed outcome reports), a fleet
 * breaker opening, a hot key, a rollout rolled back (a new rule version), a refused rule file and a
 * gRPC deadline. Every query of deploy/grafana/sluice.json and every alert expression (without its
 * threshold) must return series, and the alerts about the caused events must be pending or firing.
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Aggregator } from '@sluice/governance';
import { registerAggregatorMetrics } from '@sluice/governance/metrics';
import { EventOutcome, MemoryTransport, encodeEvents, hashValue } from '@sluice/stream';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RlsClient, call, eventually, scratch } from '../../packages/server/test/support.js';
import { CutProxy } from '../cut-proxy.js';
import { promtoolBinary, randomPrefix, redisUrl } from '../env.js';
import {
  alertRules,
  dashboardPanels,
  dashboardQueries,
  freePort,
  startPrometheus,
  type Dashboard,
  withoutThreshold,
  type NamedQuery,
  type RunningPrometheus,
} from '../prometheus.js';
import { TOKEN, deleteRedisKeys, spawnSluice, type Serve } from '../sluice-serve.js';
import { clearOfWindowEnd } from '../wait-for.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const ALERTS = join(ROOT, 'deploy/prometheus/sluice-alerts.yaml');
const ALERT_TESTS = join(ROOT, 'deploy/prometheus/sluice-alerts.test.yaml');
const DASHBOARD = join(ROOT, 'deploy/grafana/sluice.json');
const readDashboard = () => JSON.parse(readFileSync(DASHBOARD, 'utf8')) as Dashboard;

/** The rules in force (`rollout` is the limit of api:rollout; a candidate of 1 is rolled back). */
const RULES = (rollout: number) => `
resources:
  api:orders:
    limits: { algorithm: fixed-window, limit: 5, windowMs: 60000 }
    onStoreFailure: open
  api:search:
    limits: { algorithm: fixed-window, limit: 2, windowMs: 60000 }
    shadow: true
  api:payments:
    limits: { algorithm: fixed-window, limit: 1000000, windowMs: 60000 }
    hotKeys: { windowMs: 60000, threshold: { rate: 0.3, share: 0.5 }, action: lease, lease: { ttlMs: 1000 } }
  api:rollout:
    limits: { algorithm: fixed-window, limit: ${rollout}, windowMs: 3600000 }
  api:adaptive:
    limits: { algorithm: sliding-window, limit: 100, windowMs: 1000 }
  db:users:
    limits: { algorithm: gcra, limit: 1000, windowMs: 1000 }
    breaker: { scope: fleet, minimumCalls: 4, failureRateThreshold: 0.5, openDurationMs: 600000, syncMs: 50 }
adaptive:
  api:adaptive: { min: 50, max: 500, policy: demand }
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: { unit: minute, requests_per_unit: 2 }
`;

/** The alerts a store outage brings (pending while their `for` runs). */
const OUTAGE = ['SluiceStoreUnavailable', 'SluiceFallbackDecisions', 'SluiceOutcomeReportsFailing'];
/** The alerts the events this test causes must still bring once the store is back. */
const CAUSED = [
  'SluiceFallbackDecisions',
  'SluiceOutcomeReportsFailing',
  'SluiceFleetBreakerOpened',
  'SluiceRolloutRolledBack',
  'SluiceRuleFilesRefused',
];

/** The first sample of `name` on `base`'s /metrics whose labels hold every `k="v"` of `labels`; 0 when absent. */
async function metric(base: string, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(new URL('/metrics', base))).text();
  const wanted = labels === '' ? [] : labels.split(',');
  const line = text
    .split('\n')
    .find((l) => (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) && wanted.every((kv) => l.includes(kv)));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

function promtool(args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(promtoolBinary(), args, { cwd: ROOT, timeout: 30_000 }, (err, stdout, stderr) =>
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, out: stdout + stderr }),
    );
  });
}

/** A ShouldRateLimit call that never sends its message: the server answers DEADLINE_EXCEEDED after 1 ms. */
function deadlineExceeded(port: number): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const session = connect(`http://127.0.0.1:${port}`);
    session.on('error', reject);
    const stream = session.request({
      ':method': 'POST',
      ':path': '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
      'content-type': 'application/grpc',
      te: 'trailers',
      'grpc-timeout': '1m',
    });
    let status: string | undefined;
    const take = (h: Record<string, unknown>) => (status ??= h['grpc-status'] as string | undefined);
    stream.on('response', take).on('trailers', take);
    stream.on('error', () => undefined);
    stream.on('close', () => session.close(() => resolve(status)));
    stream.resume();
  });
}

describe('the Grafana dashboard and the alert rules on a real Prometheus', () => {
  const tmp = scratch();
  const prefix = randomPrefix('prom');
  const rulesPath = join(tmp.dir, 'rules.yaml');
  let proxy: CutProxy | undefined;
  let serve: Serve | undefined;
  let transport: MemoryTransport | undefined;
  let aggregator: Aggregator | undefined;
  let aggregatorMetrics: Server | undefined;
  let prometheus: RunningPrometheus | undefined;
  /** Alerts seen pending or firing while the store was cut off. */
  let duringOutage: string[] = [];

  /** Waits until Prometheus scraped both targets, successfully, after `ms` (epoch). */
  const targetsScrapedAfter = (ms: number) =>
    eventually(
      async () => {
        const { activeTargets } = await prometheus!.api<{ activeTargets: { lastScrape: string; health: string }[] }>(
          '/api/v1/targets',
        );
        return activeTargets.length === 2 && activeTargets.every((t) => t.health === 'up' && Date.parse(t.lastScrape) > ms);
      },
      30_000,
      200,
    );
  const check = (resource: string, key: string) => call(serve!.url, '/v1/check', { resource, key });
  /** The names of the alerts pending or firing now. */
  const activeAlerts = async () =>
    (await prometheus!.api<{ alerts: { labels: { alertname: string }; state: string }[] }>('/api/v1/alerts')).alerts.map(
      (a) => a.labels.alertname,
    );

  beforeAll(async () => {
    writeFileSync(rulesPath, RULES(100));
    const redis = new URL(redisUrl());
    proxy = await CutProxy.start(redis.hostname, Number(redis.port));

    // An aggregator as an application runs one: its metrics on a registry of its own, served on /metrics.
    transport = new MemoryTransport({ partitions: 2 });
    aggregator = new Aggregator({
      transport,
      rules: {
        burst: {
          id: 'burst',
          type: 'threshold',
          dimension: 'path',
          match: {},
          limit: 1000,
          windowMs: 1000,
          slices: 10,
          blockMs: 1000,
        },
      },
      snapshotMs: 0,
    });
    const registry = new Registry();
    registerAggregatorMetrics(aggregator, { registry });
    await aggregator.start();
    aggregatorMetrics = createServer((_req, res) => {
      registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
        (err: unknown) => res.writeHead(500).end(String(err)),
      );
    });
    await new Promise<void>((r) => aggregatorMetrics!.listen(0, '127.0.0.1', r));
    const event = { resource: 1, path: hashValue('/a'), user: 0, ip: 0, tenant: 0, status: 200, outcome: EventOutcome.PASSED };
    for (const partition of [0, 1]) await transport.publish(partition, encodeEvents([{ ...event, timestampMs: Date.now() }]));

    // Prometheus starts beside the service (both take seconds), scraping the port the service will take.
    const port = await freePort();
    const launchedAt = Date.now();
    const [spawned, scraping] = await Promise.allSettled([
      spawnSluice(
        [
          ...['--port', String(port), '--grpc-port', '0', '--rules', rulesPath],
          ...['--redis', `redis://127.0.0.1:${proxy.port}`, '--redis-prefix', prefix, '--store-timeout-ms', '2000'],
          ...['--rollout-poll-ms', '100', '--rollout-leadership-ms', '2000'],
        ],
        { SLUICE_SHUTDOWN_GRACE_MS: '500' },
      ),
      startPrometheus(
        join(tmp.dir, 'prometheus'),
        [
          'global: { scrape_interval: 1s, evaluation_interval: 1s }',
          `rule_files: [${JSON.stringify(ALERTS)}]`,
          'scrape_configs:',
          `  - { job_name: sluice, static_configs: [{ targets: ['127.0.0.1:${port}'] }] }`,
          `  - { job_name: sluice-aggregator, static_configs: [{ targets: ['127.0.0.1:${(aggregatorMetrics.address() as AddressInfo).port}'] }] }`,
        ].join('\n'),
      ),
    ]);
    // Whichever started is stopped by afterAll, also when the other failed.
    if (scraping.status === 'fulfilled') prometheus = scraping.value;
    if (spawned.status === 'fulfilled') serve = spawned.value;
    else throw spawned.reason;
    if (scraping.status === 'rejected') throw scraping.reason;

    // Targets reach the scrape loop some seconds after start: the events below must come after
    // each target's first samples, or the counters they move have no value to increase from.
    await targetsScrapedAfter(launchedAt);

    // The counted traffic below in one window of a minute (Redis' windows run from multiples of a
    // minute of this machine's clock): across a window's end the third gRPC call would pass.
    await clearOfWindowEnd(60_000, 5_000);
    // Traffic over HTTP: allowed and denied (api:orders, 5 a minute), shadow denials (api:search).
    for (let i = 0; i < 8; i++) await check('api:orders', 'tenant-a');
    for (let i = 0; i < 4; i++) await check('api:search', 'tenant-a');
    // Over gRPC (Envoy's API): 2 a minute per address, so the third is OVER_LIMIT; and one call
    // whose deadline passes before its message comes.
    const rls = new RlsClient(`127.0.0.1:${serve.grpcPort}`);
    try {
      const codes: string[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await rls.shouldRateLimit({
          domain: 'edge',
          descriptors: [{ entries: [{ key: 'remote_address', value: '10.0.0.1' }] }],
        });
        codes.push(r.overall_code as string);
      }
      expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    } finally {
      rls.close();
    }
    expect(await deadlineExceeded(serve.grpcPort)).toBe('4');
    // A hot key: more than half of api:payments' calls, over 0.3 a second.
    for (let i = 0; i < 5; i++) await check('api:payments', `merchant-${i}`);
    for (let i = 0; i < 30; i++) await check('api:payments', 'channel-7');
    expect(await metric(serve.url, 'sluice_hot_keys_mitigated', 'resource="api:payments"')).toBe(1);
    // Failed downstream calls open the fleet breaker of db:users.
    const failed = await call(
      serve.url,
      '/v1/outcomes',
      { items: Array.from({ length: 4 }, () => ({ resource: 'db:users', ok: false, durationMs: 5 })) },
      { token: TOKEN },
    );
    expect(failed.status, JSON.stringify(failed.json)).toBe(200);
    await eventually(async () => (await metric(serve!.url, 'sluice_fleet_breaker_transitions_total', 'to="open"')) >= 1);

    // A rollout whose candidate allows 1 an hour is rolled back by the service itself: a new rule version.
    const started = await call(
      serve.url,
      '/v1/admin/rollout',
      {
        text: RULES(1),
        author: 'test',
        reason: 'too tight',
        steps: [{ percent: 50, holdMs: 3_600_000 }],
        thresholds: { minCalls: 20 },
      },
      { token: TOKEN },
    );
    expect(started.status, JSON.stringify(started.json)).toBe(201);
    await eventually(async () => (await call(serve!.url, '/v1/admin/rollout', undefined, { token: TOKEN })).json.percent === 50);
    for (let round = 0; round < 2; round++) {
      await Promise.all(Array.from({ length: 80 }, (_, i) => check('api:rollout', `order-${i}`)));
    }
    await eventually(async () => (await call(serve!.url, '/v1/rollout')).json.rollout?.status === 'rolled_back', 30_000);
    expect(await metric(serve.url, 'sluice_rollout_rollbacks_total')).toBe(1);

    // A rule file that does not compile, read again on SIGHUP: refused, the version in force stays.
    writeFileSync(rulesPath, 'resources:\n  api:orders:\n    limits: { algorithm: nope }\n');
    serve.child.kill('SIGHUP');
    await eventually(async () => (await metric(serve!.url, 'sluice_warnings_total', 'event="rule_files_refused"')) === 1);
    writeFileSync(rulesPath, RULES(100));

    // The store goes away: fallback decisions, failed outcome reports, 503 from the rule store.
    // They go on until Prometheus has seen them over several scrapes: a counter created by its
    // first event only shows an increase from its second sample on.
    await proxy.down();
    try {
      await eventually(async () => (await metric(serve!.url, 'sluice_store_healthy')) === 0);
      expect((await call(serve.url, '/v1/admin/rules/history', undefined, { token: TOKEN })).status).toBe(503);
      let n = 0;
      await eventually(
        async () => {
          expect((await check('api:orders', `outage-${n++}`)).json.source).toBe('fallback');
          await call(serve!.url, '/v1/outcomes', { resource: 'db:users', ok: true, durationMs: 5 }, { token: TOKEN });
          duringOutage = await activeAlerts();
          return OUTAGE.every((a) => duringOutage.includes(a));
        },
        30_000,
        200,
      );
    } finally {
      await proxy.up();
    }
    await eventually(async () => (await metric(serve!.url, 'sluice_store_healthy')) === 1, 30_000);

    // Let every target be scraped a few times after the last event, so new series have two samples.
    await targetsScrapedAfter(Date.now() + 2000);
  }, 120_000);

  afterAll(async () => {
    await prometheus?.stop();
    const exit = await serve?.stop();
    await aggregator?.close();
    await transport?.close();
    await new Promise((r) => (aggregatorMetrics?.listening ? aggregatorMetrics.close(r) : r(undefined)));
    await proxy?.down();
    await deleteRedisKeys(prefix);
    tmp.remove();
    // The service drained and exited cleanly after everything this test put it through.
    if (serve !== undefined) expect(exit).toBe(0);
  });

  it('passes promtool check rules and the rules unit tests', async () => {
    const checked = await promtool(['check', 'rules', ALERTS]);
    expect(checked.code, checked.out).toBe(0);
    const tested = await promtool(['test', 'rules', ALERT_TESTS]);
    expect(tested.code, tested.out).toBe(0);
    // Every alert has unit tests, and each is tested firing and quiet.
    const tests = readFileSync(ALERT_TESTS, 'utf8');
    for (const rule of alertRules(readFileSync(ALERTS, 'utf8'))) {
      expect(tests, rule.alert).toMatch(new RegExp(`alertname: ${rule.alert}\\n\\s+exp_alerts: \\[\\]`));
      expect(tests, rule.alert).toMatch(new RegExp(`alertname: ${rule.alert}\\n\\s+exp_alerts:\\n`));
      expect(rule.labels?.severity, rule.alert).toMatch(/^(critical|warning|info)$/);
      expect(Object.keys(rule.annotations ?? {}).sort(), rule.alert).toEqual(['description', 'runbook_url', 'summary']);
    }
  });

  it('has a dashboard on the datasource variable, filtered by the resource variable', () => {
    const dashboard = readDashboard();
    expect(dashboard.templating.list.map((v) => [v.name, v.type])).toEqual([
      ['datasource', 'datasource'],
      ['resource', 'query'],
    ]);
    const panels = dashboardPanels(dashboard).filter((p) => p.type !== 'row');
    for (const p of panels) {
      expect(p.datasource, p.title).toEqual({ type: 'prometheus', uid: '${datasource}' });
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      for (const t of p.targets!) expect(t.datasource, p.title).toEqual({ type: 'prometheus', uid: '${datasource}' });
    }
    const ids = dashboardPanels(dashboard).map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('brought the alerts about the events it caused', async () => {
    for (const alert of OUTAGE) expect(duringOutage, alert).toContain(alert);
    const now = await activeAlerts();
    for (const alert of CAUSED) expect(now, alert).toContain(alert);
  });

  it('the resource variable lists the resources', async () => {
    const values = await prometheus!.api<string[]>(
      `/api/v1/label/resource/values?${new URLSearchParams({ 'match[]': 'sluice_decisions_total' }).toString()}`,
    );
    expect(values).toEqual(expect.arrayContaining(['api:orders', 'api:search', 'api:payments', 'api:rollout']));
  });

  it('every query of the dashboard and every alert expression returns series', async () => {
    const dashboard = dashboardQueries(readDashboard());
    const alerts: NamedQuery[] = alertRules(readFileSync(ALERTS, 'utf8')).map((r) => ({
      name: `alert ${r.alert}`,
      expr: withoutThreshold(r.expr),
    }));
    expect(dashboard.length).toBeGreaterThan(20);
    const empty: string[] = [];
    for (const q of [...dashboard, ...alerts]) {
      if ((await prometheus!.query(q.expr)).length === 0) empty.push(`${q.name}: ${q.expr}`);
    }
    expect(empty, 'queries that returned nothing').toEqual([]);
  });
});
