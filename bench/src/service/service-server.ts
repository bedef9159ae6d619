import type { ChildProcess } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { makeTempDir, removeTempDir, startChild, stopChild } from './service-children.js';
import { sumMetric } from './service-measure.js';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
/**
 * The `sluice` command of the workspace (runs packages/server/dist, built by `npm run build`);
 * `BENCH_SLUICE_BIN` runs another build instead (e.g. an earlier commit's, to compare).
 */
const SLUICE_BIN = process.env.BENCH_SLUICE_BIN || join(REPO_ROOT, 'packages/server/bin/sluice.js');
const START_TIMEOUT_MS = 20_000;

/** The native resource the HTTP calls decide, and the Envoy domain and descriptor key of the gRPC calls. */
export const SERVICE_RULES = Object.freeze({
  resource: 'bench:svc',
  domain: 'bench',
  descriptorKey: 'user',
});

/**
 * One limit for both APIs, generous enough that every call is allowed: Envoy descriptors count
 * in fixed windows, so the native resource uses the same fixed window of 10^9 per second.
 */
export const SERVICE_POLICY = Object.freeze({ algorithm: 'fixed-window', limit: 1_000_000_000, windowMs: 1000 } as const);

/** The rule file of the run (JSON is a valid rule file): the native resource and the Envoy domain. */
export function serviceRuleFile(): string {
  return JSON.stringify(
    {
      resources: { [SERVICE_RULES.resource]: { limits: SERVICE_POLICY } },
      domains: [
        {
          domain: SERVICE_RULES.domain,
          descriptors: [
            { key: SERVICE_RULES.descriptorKey, rate_limit: { unit: 'second', requests_per_unit: SERVICE_POLICY.limit } },
          ],
        },
      ],
    },
    null,
    2,
  );
}

/** A `sluice serve` process started by the bench. */
export interface ServiceProcess {
  readonly pid: number;
  /** Base URL of its HTTP API. */
  readonly url: string;
  /** `host:port` of its gRPC API. */
  readonly grpcTarget: string;
  /**
   * Decisions the server made so far (allowed, denied: `/v1/stats`, summed over its resources)
   * and those its store-failure policy answered (`sluice_fallback_decisions_total` of `/metrics`).
   */
  counters(): Promise<{ allowed: number; denied: number; fallbacks: number }>;
  /** SIGTERM (SIGKILL after a grace period), then removes its rule directory. */
  stop(): Promise<void>;
}

/** Where the server keeps limits and rules. */
export type ServiceStore =
  { readonly kind: 'embedded' } | { readonly kind: 'redis'; readonly url: string; readonly prefix: string };

interface ServingLine {
  readonly msg?: string;
  readonly url?: string;
  readonly grpcPort?: number;
}

/** A rule file the server is started with: its name in the run's directory and its text. */
export interface RuleFileText {
  readonly name: string;
  readonly text: string;
}

/**
 * Starts `sluice serve` on loopback with free ports (`--port 0 --grpc-port 0`), the run's rule
 * file and, on the embedded store, a rule directory of its own; resolves when it logs that it
 * serves (its ports are read from that line). `ruleFiles`: the run's rule file unless given;
 * `extraArgs`: more flags (e.g. the TLS settings).
 */
export async function startService(
  store: ServiceStore,
  ruleFiles: readonly RuleFileText[] = [{ name: 'rules.json', text: serviceRuleFile() }],
  extraArgs: readonly string[] = [],
): Promise<ServiceProcess> {
  const dir = await makeTempDir('sluice-bench-service-');
  const rulesArgs: string[] = [];
  for (const file of ruleFiles) {
    await writeFile(join(dir, file.name), file.text);
    rulesArgs.push('--rules', join(dir, file.name));
  }
  const args = [
    SLUICE_BIN,
    'serve',
    ...rulesArgs,
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    '--grpc-port',
    '0',
    '--log-level',
    'info',
    ...(store.kind === 'embedded'
      ? ['--rules-dir', join(dir, 'versions')]
      : ['--redis', store.url, '--redis-prefix', store.prefix]),
    ...extraArgs,
  ];
  // The server's own settings come from its flags only.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_')));
  const child: ChildProcess = startChild(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  let output = '';
  let serving: ServingLine | undefined;
  let exitCode: number | string | null | undefined;
  child.once('exit', (code, signal) => (exitCode = code ?? signal));
  child.once('error', (err) => (exitCode = err.message));
  const collect = (chunk: Buffer) => {
    // Kept short: only the start-up and a failure's last words are ever shown.
    output = (output + chunk.toString('utf8')).slice(-8000);
    if (serving !== undefined) return;
    for (const line of output.split('\n')) {
      if (!line.includes('sluice serving')) continue;
      try {
        serving = JSON.parse(line) as ServingLine;
      } catch {
        // a partial line: the next chunk completes it
      }
    }
  };
  child.stdout!.on('data', collect);
  child.stderr!.on('data', collect);
  const stop = async () => {
    await stopChild(child);
    await removeTempDir(dir);
  };
  const deadline = performance.now() + START_TIMEOUT_MS;
  while (serving?.url === undefined || serving.grpcPort === undefined) {
    if (exitCode !== undefined || performance.now() > deadline) {
      await stop();
      throw new Error(`sluice serve did not start (${exitCode === undefined ? 'timed out' : `exit ${exitCode}`}):\n${output}`);
    }
    await sleep(50);
  }
  const url = serving.url;
  const grpcTarget = `127.0.0.1:${serving.grpcPort}`;
  return {
    pid: child.pid!,
    url,
    grpcTarget,
    counters: async () => {
      const [stats, metrics] = await Promise.all([request(`${url}/v1/stats`), request(`${url}/metrics`)]);
      const body = (await stats.body.json()) as { resources?: { allowed: number; denied: number }[] };
      const text = await metrics.body.text();
      if (stats.statusCode !== 200 || !Array.isArray(body.resources))
        throw new Error(`GET /v1/stats answered ${stats.statusCode}`);
      if (metrics.statusCode !== 200) throw new Error(`GET /metrics answered ${metrics.statusCode}`);
      return {
        allowed: body.resources.reduce((n, r) => n + r.allowed, 0),
        denied: body.resources.reduce((n, r) => n + r.denied, 0),
        fallbacks: sumMetric(text, 'sluice_fallback_decisions_total'),
      };
    },
    stop,
  };
}
