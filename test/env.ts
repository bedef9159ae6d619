import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Where the real servers started by scripts/test-all.sh listen. Integration tests fail loudly
 * when these are missing instead of skipping, so a misconfigured run cannot pass silently.
 */
function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run the tests with "npm run test:all", which starts the servers`);
  }
  return value;
}

/** URL of the standalone Redis, e.g. redis://127.0.0.1:6390. */
export function redisUrl(): string {
  return required('SLUICE_REDIS_URL');
}

/** Redis Cluster seed nodes as host:port pairs. */
export function redisClusterNodes(): { host: string; port: number }[] {
  return required('SLUICE_REDIS_CLUSTER_NODES')
    .split(',')
    .map((hp) => {
      const [host, port] = hp.trim().split(':');
      return { host: host!, port: Number(port) };
    });
}

/** URL of the NATS server (JetStream enabled), e.g. nats://127.0.0.1:4222. */
export function natsUrl(): string {
  return required('SLUICE_NATS_URL');
}

/** RocketMQ proxy endpoints (gRPC), e.g. 127.0.0.1:18081. */
export function rocketMqEndpoints(): string {
  return required('SLUICE_ROCKETMQ_ENDPOINTS');
}

/** The RocketMQ proxy's pid: clients reach the proxy at the address it advertises, so an
 * outage drill stops the process (SIGSTOP) instead of cutting a connection. */
export function rocketMqProxyPid(): number {
  return Number(required('SLUICE_ROCKETMQ_PROXY_PID'));
}

/**
 * Creates lite consumer groups on the running RocketMQ broker (scripts/rocketmq-server.sh
 * groups): the transport's lite mode reads only through groups bound to the LITE parent topic.
 */
export function createRocketMqGroups(groups: readonly string[]): void {
  required('SLUICE_ROCKETMQ_ENDPOINTS');
  const script = fileURLToPath(new URL('../scripts/rocketmq-server.sh', import.meta.url));
  execFileSync('bash', [script, 'groups', groups.join(',')], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 120_000 });
}

/** host:port of the Temporal frontend. */
export function temporalAddress(): string {
  return required('SLUICE_TEMPORAL_ADDRESS');
}

/** A random prefix so tests never see each other's keys. */
export function randomPrefix(label = 't'): string {
  return `${label}:${Math.random().toString(36).slice(2, 10)}:`;
}

/** The container image scripts/image.sh built from the Dockerfile, e.g. localhost/sluice:test. */
export function containerImage(): string {
  return required('SLUICE_IMAGE');
}

/** The podman command line (with the runtime flags this machine needs) that runs it. */
export function podmanCommand(): string[] {
  return required('SLUICE_PODMAN')
    .split(' ')
    .filter((w) => w !== '');
}

/** The helm binary scripts/helm.sh built (it lints and renders deploy/helm/sluice). */
export function helmBinary(): string {
  return required('SLUICE_HELM');
}

/** The prometheus binary scripts/prometheus.sh found (each test starts its own server). */
export function prometheusBinary(): string {
  return required('SLUICE_PROMETHEUS_BIN');
}

/** The promtool binary scripts/prometheus.sh found (it checks and unit-tests alert rules). */
export function promtoolBinary(): string {
  return required('SLUICE_PROMTOOL_BIN');
}

/** The OpenTelemetry Collector scripts/otelcol.sh built (each test starts its own, with its own pipeline). */
export function otelcolBinary(): string {
  return required('SLUICE_OTELCOL_BIN');
}
