/* eslint-disable @typescript-eslint/no-explicit-any --
   the assertions read rendered Kubernetes manifests dynamically */
/**
 * The Helm chart (deploy/helm/sluice), linted and rendered by the real helm for several value
 * sets, and what it renders checked as Kubernetes would read it: probes and their paths, named
 * ports, the restricted security context, secret references, the rules it mounts (compiled by
 * Sluice's own rule compiler). There is no cluster here: nothing is applied.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compileRules } from '@sluice/rules';
import { parse, parseAllDocuments } from 'yaml';
import { afterAll, describe, expect, it } from 'vitest';
import { helmBinary } from '../env.js';
import { command } from '../local-registry.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CHART = join(ROOT, 'deploy/helm/sluice');
const helm = helmBinary();
const scratch = mkdtempSync(join(tmpdir(), 'sluice-helm-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

let files = 0;
/** A values file holding `values`, as a user would pass it with -f. */
function valuesFile(values: object): string {
  const path = join(scratch, `values-${files++}.json`);
  writeFileSync(path, JSON.stringify(values));
  return path;
}

type Manifest = {
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  spec?: any;
  data?: Record<string, string>;
};

async function render(values: object = {}): Promise<Manifest[]> {
  const r = await command(helm, ['template', 'edge', CHART, '--namespace', 'limits', '-f', valuesFile(values)], ROOT);
  if (r.code !== 0) throw new Error(`helm template failed: ${r.stderr}`);
  return parseAllDocuments(r.stdout)
    .map((d) => d.toJS() as Manifest | null)
    .filter((m): m is Manifest => m !== null);
}

async function refusal(values: object): Promise<string> {
  const r = await command(helm, ['template', 'edge', CHART, '-f', valuesFile(values)], ROOT);
  expect(r.code).not.toBe(0);
  return r.stderr;
}

const one = (ms: Manifest[], kind: string, name?: string): Manifest => {
  const found = ms.filter((m) => m.kind === kind && (name === undefined || m.metadata.name === name));
  expect(found, `${kind} ${name ?? ''}`).toHaveLength(1);
  return found[0]!;
};
/** A list in a rendered manifest, typed as the test reads it. */
const list = <T>(value: unknown): T[] => value as T[];
const containerOf = (ms: Manifest[]): any => list<any>(one(ms, 'Deployment').spec.template.spec.containers)[0];
const envOf = (ms: Manifest[]): Record<string, any> =>
  Object.fromEntries(
    list<{ name: string; value?: string; valueFrom?: unknown }>(containerOf(ms).env).map((e) => [e.name, e.value ?? e.valueFrom]),
  );

/** The ConfigMap the rules volume mounts. */
const volume = (volumes: unknown): string | undefined =>
  list<{ name: string; configMap?: { name: string } }>(volumes).find((v) => v.name === 'rules')?.configMap?.name;

/** A Kubernetes label selector. */
type Selector = {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
};

/** Whether `selector` selects `labels`. */
function selects(selector: Selector, labels: Record<string, string>): boolean {
  const byLabels = Object.entries(selector.matchLabels ?? {}).every(([k, v]) => labels[k] === v);
  return (
    byLabels &&
    (selector.matchExpressions ?? []).every(({ key, operator, values = [] }) => {
      const has = key in labels;
      if (operator === 'Exists') return has;
      if (operator === 'DoesNotExist') return !has;
      if (operator === 'In') return has && values.includes(labels[key]!);
      if (operator === 'NotIn') return !has || !values.includes(labels[key]!);
      throw new Error(`unknown selector operator ${operator}`);
    })
  );
}

const REDIS = { store: { type: 'redis', redis: { url: 'redis://redis.limits:6379' } }, replicaCount: 3 };

describe('the Helm chart', () => {
  it('passes helm lint --strict with its defaults, with Redis and with the PrometheusRule', async () => {
    for (const values of [{}, REDIS, { prometheusRule: { enabled: true } }]) {
      const r = await command(helm, ['lint', '--strict', CHART, '-f', valuesFile(values)], ROOT);
      expect(r.code, r.stdout + r.stderr).toBe(0);
    }
  });

  it('renders one pod on the embedded store, with probes on the named http port', async () => {
    const ms = await render();
    const deployment = one(ms, 'Deployment', 'edge-sluice');
    expect(deployment.spec.replicas).toBe(1);
    // Never two pods at once on the embedded store, even during a rollout.
    expect(deployment.spec.strategy).toEqual({ type: 'Recreate' });
    const c = containerOf(ms);
    expect(c.ports).toEqual([
      { name: 'http', containerPort: 8080, protocol: 'TCP' },
      { name: 'grpc', containerPort: 8081, protocol: 'TCP' },
    ]);
    expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'http' });
    expect(c.startupProbe.httpGet).toEqual({ path: '/healthz', port: 'http' });
    expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'http' });
    expect(c.readinessProbe.failureThreshold).toBeGreaterThanOrEqual(1);
    const env = envOf(ms);
    expect(env).toMatchObject({ SLUICE_HOST: '0.0.0.0', SLUICE_PORT: '8080', SLUICE_GRPC_PORT: '8081' });
    expect(env.SLUICE_REDIS_URL).toBeUndefined();
    // Drain: the grace the server is told fits in the pod's, after the pre-stop pause.
    const grace = Number(env.SLUICE_SHUTDOWN_GRACE_MS) / 1000;
    const pause = Number(c.lifecycle.preStop.exec.command[1]);
    expect(deployment.spec.template.spec.terminationGracePeriodSeconds).toBeGreaterThan(grace + pause);
    expect(one(ms, 'PodDisruptionBudget').spec.maxUnavailable).toBe(1);
    expect(ms.filter((m) => ['HorizontalPodAutoscaler', 'ServiceMonitor', 'PrometheusRule'].includes(m.kind))).toEqual([]);
  });

  it('runs restricted: non-root, read-only root file system, no privilege escalation, no capabilities', async () => {
    const ms = await render(REDIS);
    const pod = one(ms, 'Deployment').spec.template.spec;
    expect(pod.securityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: 1000,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(pod.automountServiceAccountToken).toBe(false);
    const c = pod.containers[0];
    expect(c.securityContext).toEqual({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      privileged: false,
      capabilities: { drop: ['ALL'] },
    });
    // The only writable places are volumes.
    const mounts = Object.fromEntries(
      list<{ name: string; mountPath: string; readOnly?: boolean }>(c.volumeMounts).map((m) => [m.mountPath, m]),
    );
    expect(mounts['/etc/sluice/rules']).toMatchObject({ name: 'rules', readOnly: true });
    expect(Object.keys(mounts).sort()).toEqual(['/etc/sluice/rules', '/tmp', '/var/lib/sluice']);
  });

  it('exposes named http and grpc ports on the Service and a headless Service for Envoy', async () => {
    const ms = await render(REDIS);
    for (const name of ['edge-sluice', 'edge-sluice-headless']) {
      const svc = one(ms, 'Service', name);
      expect(
        list<{ name: string; port: number; targetPort: string; appProtocol: string }>(svc.spec.ports).map((p) => [
          p.name,
          p.port,
          p.targetPort,
          p.appProtocol,
        ]),
      ).toEqual([
        ['http', 8080, 'http', 'http'],
        ['grpc', 8081, 'grpc', 'grpc'],
      ]);
      expect(svc.spec.selector).toEqual({ 'app.kubernetes.io/name': 'sluice', 'app.kubernetes.io/instance': 'edge' });
    }
    expect(one(ms, 'Service', 'edge-sluice-headless').spec.clusterIP).toBe('None');
  });

  it('mounts the rules from a ConfigMap that Sluice compiles, as the source of truth by default', async () => {
    const rules = 'resources:\n  api:payments:\n    limits: { algorithm: gcra, limit: 50, windowMs: 1000 }\n';
    const ms = await render({ ...REDIS, rules: { content: rules } });
    const text = one(ms, 'ConfigMap', 'edge-sluice-rules').data!['rules.yaml']!;
    expect(Object.keys(compileRules(text, { file: 'rules.yaml' }).resources)).toEqual(['api:payments']);
    expect(envOf(ms)).toMatchObject({ SLUICE_RULES: '/etc/sluice/rules/rules.yaml', SLUICE_RULES_MODE: 'files' });
    const pod = one(ms, 'Deployment').spec.template;
    expect(volume(pod.spec.volumes)).toBe('edge-sluice-rules');
    // The pods follow an edited ConfigMap themselves: no restart for a rule change.
    expect(pod.metadata.annotations?.['checksum/rules']).toBeUndefined();
    // In seed mode the file only seeds the store, so a changed file rolls the pods.
    const seeded = one(await render({ ...REDIS, rules: { content: rules, mode: 'seed' } }), 'Deployment').spec.template;
    expect(seeded.spec.containers[0].env).toContainEqual({ name: 'SLUICE_RULES_MODE', value: 'seed' });
    const other = await render({ ...REDIS, rules: { content: rules.replace('50', '60'), mode: 'seed' } });
    expect(one(other, 'Deployment').spec.template.metadata.annotations['checksum/rules']).not.toBe(
      seeded.metadata.annotations['checksum/rules'],
    );
    // The chart's own default rules compile too.
    const defaults = one(await render(), 'ConfigMap').data!['rules.yaml']!;
    expect(() => compileRules(defaults, { file: 'rules.yaml' })).not.toThrow();
    // A ConfigMap of the user's own replaces the chart's.
    const own = await render({ rules: { existingConfigMap: 'my-rules' } });
    expect(own.filter((m) => m.kind === 'ConfigMap')).toEqual([]);
    expect(volume(one(own, 'Deployment').spec.template.spec.volumes)).toBe('my-rules');
  });

  it('takes the Redis URL and the tokens from Secrets, never from values in clear', async () => {
    const ms = await render({
      store: { type: 'redis', redis: { existingSecret: 'redis-conn', existingSecretKey: 'uri' }, prefix: 'edge:' },
      auth: { existingSecret: 'sluice-tokens' },
      replicaCount: 2,
    });
    const env = envOf(ms);
    expect(env.SLUICE_REDIS_URL).toEqual({ secretKeyRef: { name: 'redis-conn', key: 'uri' } });
    expect(env.SLUICE_REDIS_PREFIX).toBe('edge:');
    for (const [name, key] of [
      ['SLUICE_ADMIN_TOKEN', 'admin-token'],
      ['SLUICE_API_TOKEN', 'api-token'],
      ['SLUICE_OUTCOMES_TOKEN', 'outcomes-token'],
    ]) {
      expect(env[name!]).toEqual({ secretKeyRef: { name: 'sluice-tokens', key, optional: true } });
    }
    expect(one(ms, 'Deployment').spec.strategy).toBeUndefined();
  });

  it('renders Redis Cluster seeds, the autoscaler and the ServiceMonitor when asked', async () => {
    const ms = await render({
      store: { type: 'redisCluster', redisCluster: { nodes: ['redis-0.redis:6379', 'redis-1.redis:6379'] } },
      autoscaling: { enabled: true, minReplicas: 2, maxReplicas: 5 },
      serviceMonitor: { enabled: true, labels: { release: 'prom' } },
      env: { SLUICE_MAX_BATCH: '200', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel-collector:4318', OTEL_SERVICE_NAME: 'edge' },
    });
    const env = envOf(ms);
    expect(env.SLUICE_REDIS_CLUSTER).toBe('redis-0.redis:6379,redis-1.redis:6379');
    expect(env.SLUICE_MAX_BATCH).toBe('200');
    expect(env.SLUICE_WORKERS).toBe('1');
    // OpenTelemetry's standard variables pass through as they are.
    expect(env.OTEL_EXPORTER_OTLP_ENDPOINT).toBe('http://otel-collector:4318');
    expect(env.OTEL_SERVICE_NAME).toBe('edge');
    expect(one(ms, 'Deployment').spec.replicas).toBeUndefined();
    const hpa = one(ms, 'HorizontalPodAutoscaler');
    expect(hpa.spec).toMatchObject({
      minReplicas: 2,
      maxReplicas: 5,
      scaleTargetRef: { kind: 'Deployment', name: 'edge-sluice' },
    });
    const monitor = one(ms, 'ServiceMonitor');
    expect(monitor.spec.endpoints).toEqual([{ port: 'http', path: '/metrics', interval: '15s' }]);
    expect(monitor.metadata.labels?.release).toBe('prom');
    // It selects one Service: the headless one has the same pods, which would be scraped twice.
    const selected = ms.filter(
      (m) => m.kind === 'Service' && selects(monitor.spec.selector as Selector, m.metadata.labels ?? {}),
    );
    expect(selected.map((m) => m.metadata.name)).toEqual(['edge-sluice']);
  });

  it('runs workers in each pod on Redis (sluice serve --workers)', async () => {
    const redis = { type: 'redis', redis: { url: 'redis://redis:6379' } };
    expect(envOf(await render({ store: redis, workers: 2 })).SLUICE_WORKERS).toBe('2');
    expect(envOf(await render({ store: redis, workers: 'auto' })).SLUICE_WORKERS).toBe('auto');
    expect(await refusal({ workers: 2 })).toContain('store.type memory keeps its counts in one process: workers must be 1');
    expect(await refusal({ store: redis, workers: 0 })).toMatch(/workers/);
    expect(await refusal({ store: redis, env: { SLUICE_WORKERS: '2' } })).toContain('env.SLUICE_WORKERS is set by the chart');
  });

  it('ships the alert rules of deploy/prometheus as a PrometheusRule when asked', async () => {
    const ms = await render({ prometheusRule: { enabled: true, labels: { release: 'prom' } } });
    const rule = one(ms, 'PrometheusRule', 'edge-sluice');
    expect(rule.metadata.labels).toMatchObject({ release: 'prom', 'app.kubernetes.io/instance': 'edge' });
    // The same rules as the file Prometheus loads directly, expressions and templates unchanged.
    const file = parse(readFileSync(join(ROOT, 'deploy/prometheus/sluice-alerts.yaml'), 'utf8')) as { groups: unknown[] };
    expect(rule.spec).toEqual({ groups: file.groups });
    expect(JSON.stringify(rule.spec)).toContain('{{ $labels.instance }}');
  });

  it('refuses values that would break the global limit or that it would silently ignore', async () => {
    expect(await refusal({ replicaCount: 2 })).toContain('store.type memory keeps each pod');
    expect(await refusal({ autoscaling: { enabled: true } })).toContain('store.type memory keeps each pod');
    expect(await refusal({ store: { type: 'redis' } })).toContain('needs store.redis.url or store.redis.existingSecret');
    expect(await refusal({ store: { type: 'redisCluster' } })).toContain('needs store.redisCluster.nodes');
    expect(await refusal({ store: { type: 'etcd' } })).toMatch(/store\.type|type/);
    expect(await refusal({ replicas: 3 })).toMatch(/additional properties|replicas/i);
    expect(await refusal({ env: { SLUICE_PORT: '9000' } })).toContain('env.SLUICE_PORT is set by the chart');
    expect(await refusal({ env: { PORT: '9000' } })).toMatch(/PORT/);
  });
});
