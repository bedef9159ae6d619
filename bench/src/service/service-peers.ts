/**
 * The service-peers part: `sluice serve` beside envoyproxy/ratelimit (Go, its defaults), both on
 * the same Redis with the same Envoy YAML, driven by the same load generators: ghz for gRPC
 * `ShouldRateLimit`, wrk for HTTP (Sluice's `/v1/check` against envoyproxy/ratelimit's `/json`).
 * Each cell runs the two peers one after the other, in alternating order, `rounds` times, and
 * reports the medians and their ratios. See bench/README.md.
 */
import { spawnSync } from 'node:child_process';
import { writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { freePort } from '../harness/redis-server.js';
import { makeTempDir, removeTempDir, startChild, stopChild, treeCpu } from './service-children.js';
import {
  ENVOY_JSON_BODY,
  PEER_DESCRIPTOR_KEY,
  PEER_DOMAIN,
  runGhz,
  runWrkBodies,
  sluiceCheckBody,
  type LoadResult,
  type LoadRun,
} from './service-peers-load.js';
import { cacheDir, findOrBuild, findWrkBinary, type Found } from './service-peers-tools.js';
import { startService, type ServiceProcess } from './service-server.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

/** How the part runs. */
export interface PeerSettings {
  readonly runId: string;
  readonly redisUrl: string;
  readonly warmupSec: number;
  readonly measureSec: number;
  /** Measurements of each peer in each cell; the medians are reported. */
  readonly rounds: number;
  readonly inFlight: readonly number[];
  /** Key counts of the cells; 1 is one hot key. */
  readonly keys: readonly number[];
  /** The wrk binary as asked (`BENCH_WRK`). */
  readonly wrk: string | undefined;
  /** `sluice serve --workers` (`BENCH_SLUICE_WORKERS`). @default 1 */
  readonly workers?: number;
  /** The connections ghz opens to either peer (`BENCH_GHZ_CONNECTIONS`). @default 1 */
  readonly ghzConnections?: number;
}

export type PeerApi = 'gRPC' | 'HTTP';
export type PeerName = 'sluice' | 'envoy';

/** One peer's medians in one cell. */
export interface PeerFigures {
  readonly perSec: number;
  readonly p50Us: number;
  readonly p99Us: number;
  /** Server CPU per call, microseconds (user + system over the measured run). */
  readonly cpuUsPerCall: number;
  readonly errors: number;
  readonly firstError: string | undefined;
}

/** One cell: an API, a key count and calls in flight; both peers' medians. */
export interface PeerCell {
  readonly api: PeerApi;
  readonly keys: number;
  readonly inFlight: number;
  readonly sluice: PeerFigures;
  readonly envoy: PeerFigures;
  /** Sluice's decisions answered without a store round trip (pre-filter, leases), of all it made. */
  readonly localShare: number;
}

/** Seconds each server is loaded on each API before the first cell. */
const WARMUP_SEC = 5;

/** What the part measured, or why it could not. */
export interface PeerResult {
  readonly cells: readonly PeerCell[];
  /** Cells not run, and why (a tool missing). */
  readonly skipped: readonly string[];
  readonly settings: PeerSettings;
}

/** The Envoy YAML both peers load (envoyproxy/ratelimit's format, unchanged for Sluice). */
export const PEER_YAML = `domain: ${PEER_DOMAIN}
descriptors:
  - key: ${PEER_DESCRIPTOR_KEY}
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`;

/** Sluice's native resource of the HTTP cells: the same fixed window as the YAML's. */
export const PEER_RESOURCE = 'bench:peers';
const NATIVE_RULES = JSON.stringify({
  resources: { [PEER_RESOURCE]: { limits: { algorithm: 'fixed-window', limit: 1_000_000_000, windowMs: 1000 } } },
});

/** A running envoyproxy/ratelimit. */
interface EnvoyProcess {
  readonly pid: number;
  readonly grpcTarget: string;
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * Starts envoyproxy/ratelimit with its defaults but for what it must be told: the Redis
 * (host:port, TCP), the rules directory holding {@link PEER_YAML}, its ports, statsd off.
 */
async function startEnvoy(bin: string, redisUrl: string): Promise<EnvoyProcess> {
  const dir = await makeTempDir('sluice-bench-envoy-');
  await mkdir(join(dir, 'ratelimit', 'config'), { recursive: true });
  await writeFile(join(dir, 'ratelimit', 'config', 'bench.yaml'), PEER_YAML);
  const redis = new URL(redisUrl);
  const [grpcPort, httpPort, debugPort] = [await freePort(), await freePort(), await freePort()];
  const env = {
    ...process.env,
    REDIS_URL: `${redis.hostname}:${redis.port || '6379'}`,
    ...(redis.password ? { REDIS_AUTH: decodeURIComponent(redis.password) } : {}),
    REDIS_SOCKET_TYPE: 'tcp',
    RUNTIME_ROOT: dir,
    RUNTIME_SUBDIRECTORY: 'ratelimit',
    RUNTIME_WATCH_ROOT: 'false',
    USE_STATSD: 'false',
    GRPC_HOST: '127.0.0.1',
    GRPC_PORT: String(grpcPort),
    HOST: '127.0.0.1',
    PORT: String(httpPort),
    DEBUG_HOST: '127.0.0.1',
    DEBUG_PORT: String(debugPort),
    LOG_LEVEL: 'warn',
  };
  const child = startChild(bin, [], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let output = '';
  const keep = (c: Buffer) => (output = (output + c.toString('utf8')).slice(-4000));
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const url = `http://127.0.0.1:${httpPort}`;
  const stop = async () => {
    await stopChild(child);
    await removeTempDir(dir);
  };
  const deadline = performance.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null || performance.now() > deadline) {
      await stop();
      throw new Error(`envoyproxy/ratelimit did not start:\n${output}`);
    }
    try {
      const r = await request(`${url}/healthcheck`);
      await r.body.text();
      if (r.statusCode === 200) break;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  return { pid: child.pid!, grpcTarget: `127.0.0.1:${grpcPort}`, url, stop };
}

/** Sluice's decisions by source (`sluice_decisions_total`), summed over resources. */
async function decisionsBySource(url: string): Promise<{ local: number; total: number }> {
  const r = await request(`${url}/metrics`);
  const text = await r.body.text();
  let local = 0;
  let total = 0;
  for (const m of text.matchAll(/^sluice_decisions_total\{[^}]*source="(\w+)"[^}]*\} (\d+(?:\.\d+)?)$/gm)) {
    const n = Number(m[2]);
    total += n;
    if (m[1] === 'prefilter' || m[1] === 'lease') local += n;
  }
  return { local, total };
}

/** CLK_TCK, the unit of /proc CPU times (100 on Linux unless told otherwise). */
export function clockTicksPerSec(): number {
  const n = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout?.trim());
  return Number.isInteger(n) && n > 0 ? n : 100;
}

/** One measured run: a warm-up, then the load, with the server's CPU read around it. */
export async function measure(
  pid: number,
  load: (seconds: number) => Promise<LoadResult>,
  s: Pick<PeerSettings, 'warmupSec' | 'measureSec'>,
  clockTicks: number,
): Promise<LoadResult & { cpuUsPerCall: number }> {
  await load(s.warmupSec);
  const before = await treeCpu(pid);
  const result = await load(s.measureSec);
  const after = await treeCpu(pid);
  const ticks = before === undefined || after === undefined ? NaN : after.user + after.system - before.user - before.system;
  const calls = result.perSec * s.measureSec;
  return { ...result, cpuUsPerCall: ((ticks / clockTicks) * 1e6) / calls };
}

function median(values: readonly number[]): number {
  const v = values.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 === 1 ? v[mid]! : (v[mid - 1]! + v[mid]!) / 2;
}

/** The medians of a cell's runs (errors summed). */
export function figures(runs: readonly (LoadResult & { cpuUsPerCall: number })[]): PeerFigures {
  return {
    perSec: median(runs.map((r) => r.perSec)),
    p50Us: median(runs.map((r) => r.p50Us)),
    p99Us: median(runs.map((r) => r.p99Us)),
    cpuUsPerCall: median(runs.map((r) => r.cpuUsPerCall)),
    errors: runs.reduce((n, r) => n + r.errors, 0),
    firstError: runs.find((r) => r.firstError !== undefined)?.firstError,
  };
}

/** Runs every cell; tools that cannot be found or built skip their cells with the reason. */
export async function runServicePeers(s: PeerSettings, progress: (line: string) => void): Promise<PeerResult> {
  const clockTicks = clockTicksPerSec();
  const cache = cacheDir(process.env);
  const [ghz, ratelimit] = [await findOrBuild('ghz', cache, progress), await findOrBuild('ratelimit', cache, progress)];
  const wrk = findWrkBinary(s.wrk);
  const skipped: string[] = [];
  const why = (f: Found) => ('missing' in f ? f.missing : '');
  if ('missing' in ratelimit) {
    skipped.push(`every cell: envoyproxy/ratelimit unavailable (${why(ratelimit)})`);
    return { cells: [], skipped, settings: s };
  }
  if ('missing' in ghz) skipped.push(`gRPC cells: ghz unavailable (${why(ghz)})`);
  if ('missing' in wrk) skipped.push(`HTTP cells: wrk unavailable (${why(wrk)})`);
  const envoy = await startEnvoy(ratelimit.path, s.redisUrl);
  let sluice: ServiceProcess | undefined;
  const cells: PeerCell[] = [];
  try {
    sluice = await startService(
      { kind: 'redis', url: s.redisUrl, prefix: `bench:${s.runId}:peers` },
      [
        { name: 'bench.yaml', text: PEER_YAML },
        { name: 'native.json', text: NATIVE_RULES },
      ],
      (s.workers ?? 1) > 1 ? ['--workers', String(s.workers)] : [],
    );
    const server = sluice;
    // Both servers are warmed up on both APIs first (JIT, connection pools), so the first cell
    // does not measure the warm-up.
    progress('  warming up both servers...');
    for (const target of [server.grpcTarget, envoy.grpcTarget]) {
      if ('path' in ghz) {
        await runGhz(ghz.path, target, { inFlight: 16, keys: 1000, seconds: WARMUP_SEC, connections: s.ghzConnections ?? 1 });
      }
    }
    if ('path' in wrk) {
      await runWrkBodies(wrk.path, `${server.url}/v1/check`, sluiceCheckBody(PEER_RESOURCE), {
        inFlight: 16,
        keys: 1000,
        seconds: WARMUP_SEC,
      });
      await runWrkBodies(wrk.path, `${envoy.url}/json`, ENVOY_JSON_BODY, { inFlight: 16, keys: 1000, seconds: WARMUP_SEC });
    }
    for (const api of ['gRPC', 'HTTP'] as const) {
      const tool = api === 'gRPC' ? ghz : wrk;
      if ('missing' in tool) continue;
      for (const keys of s.keys) {
        for (const inFlight of s.inFlight) {
          const run = (seconds: number): LoadRun => ({ inFlight, keys, seconds, connections: s.ghzConnections ?? 1 });
          const loads: Record<PeerName, { pid: number; load: (seconds: number) => Promise<LoadResult> }> =
            api === 'gRPC'
              ? {
                  sluice: { pid: server.pid, load: (sec) => runGhz(tool.path, server.grpcTarget, run(sec)) },
                  envoy: { pid: envoy.pid, load: (sec) => runGhz(tool.path, envoy.grpcTarget, run(sec)) },
                }
              : {
                  sluice: {
                    pid: server.pid,
                    load: (sec) => runWrkBodies(tool.path, `${server.url}/v1/check`, sluiceCheckBody(PEER_RESOURCE), run(sec)),
                  },
                  envoy: {
                    pid: envoy.pid,
                    load: (sec) => runWrkBodies(tool.path, `${envoy.url}/json`, ENVOY_JSON_BODY, run(sec)),
                  },
                };
          const label = `${api}, ${keys === 1 ? 'hot key' : `${fmtInt(keys)} keys`}, ${inFlight} in flight`;
          progress(`  ${label}...`);
          const runs: Record<PeerName, (LoadResult & { cpuUsPerCall: number })[]> = { sluice: [], envoy: [] };
          const before = await decisionsBySource(server.url);
          for (let round = 0; round < s.rounds; round++) {
            // Alternate who goes first, so neither always runs on the warmer machine.
            const order: PeerName[] = round % 2 === 0 ? ['sluice', 'envoy'] : ['envoy', 'sluice'];
            for (const peer of order) runs[peer].push(await measure(loads[peer].pid, loads[peer].load, s, clockTicks));
          }
          const after = await decisionsBySource(server.url);
          const total = after.total - before.total;
          cells.push({
            api,
            keys,
            inFlight,
            sluice: figures(runs.sluice),
            envoy: figures(runs.envoy),
            localShare: total > 0 ? (after.local - before.local) / total : NaN,
          });
        }
      }
    }
  } finally {
    await sluice?.stop();
    await envoy.stop();
  }
  return { cells, skipped, settings: s };
}

const ms = (us: number) => fmt(us / 1000, 2);
const where = (c: PeerCell) => `${c.api}, ${c.keys === 1 ? 'hot key' : `${fmtInt(c.keys)} keys`}, ${c.inFlight} in flight`;

/** The part's table: both peers per cell, and Sluice/envoy ratios. */
export function servicePeersTable(r: PeerResult): Table {
  const s = r.settings;
  return {
    title: `sluice serve${(s.workers ?? 1) > 1 ? ` --workers ${s.workers}` : ''} beside envoyproxy/ratelimit (same Redis, same Envoy YAML; gRPC by ghz over ${s.ghzConnections ?? 1} connection${(s.ghzConnections ?? 1) > 1 ? 's' : ''}, HTTP by wrk; medians of ${s.rounds} runs of ${s.measureSec} s)`,
    header: [
      'cell',
      'Sluice/s',
      'envoy/s',
      'ratio',
      'p50 ms S / e',
      'ratio',
      'p99 ms S / e',
      'ratio',
      'CPU us/call S / e',
      'local',
      'errors S / e',
    ],
    align: ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    rows: r.cells.map((c) => [
      where(c),
      fmtInt(c.sluice.perSec),
      fmtInt(c.envoy.perSec),
      fmtRatio(c.sluice.perSec / c.envoy.perSec),
      `${ms(c.sluice.p50Us)} / ${ms(c.envoy.p50Us)}`,
      fmtRatio(c.sluice.p50Us / c.envoy.p50Us),
      `${ms(c.sluice.p99Us)} / ${ms(c.envoy.p99Us)}`,
      fmtRatio(c.sluice.p99Us / c.envoy.p99Us),
      `${fmtInt(c.sluice.cpuUsPerCall)} / ${fmtInt(c.envoy.cpuUsPerCall)}`,
      Number.isNaN(c.localShare) ? '-' : `${fmt(100 * c.localShare, 1)}%`,
      `${fmtInt(c.sluice.errors)} / ${fmtInt(c.envoy.errors)}`,
    ]),
    notes: [
      'ratio: Sluice / envoy (requests/s: higher is better; latency: lower is better). CPU: server CPU per call (with --workers, the primary and every worker).',
      "local: Sluice's decisions answered without a Redis round trip (pre-filter, leases), of all it made in the cell.",
      ...r.skipped.map((x) => `not run: ${x}`),
      ...r.cells
        .flatMap((c) => [
          c.sluice.firstError === undefined ? [] : [`${where(c)}: Sluice's first error: ${c.sluice.firstError}`],
          c.envoy.firstError === undefined ? [] : [`${where(c)}: envoy's first error: ${c.envoy.firstError}`],
        ])
        .flat(),
    ],
  };
}

/**
 * The SPEC's service target, judged in every cell: Sluice's requests/s over envoyproxy/ratelimit's,
 * and its p99 over envoy's (with every core in use: `BENCH_SLUICE_WORKERS`).
 */
export const SERVICE_PEER_TARGETS = Object.freeze({ throughput: 1.5, p99: 0.75 });

/** The summary's rows of this part: per cell, the SPEC's service target, without errors. */
export function servicePeersSummaryRows(r: PeerResult | undefined): [string, string, string][] {
  const { throughput, p99 } = SERVICE_PEER_TARGETS;
  const target = `sluice serve vs envoyproxy/ratelimit: requests/s >= ${fmtRatio(throughput)}, p99 <= ${fmtRatio(p99)}`;
  if (r === undefined) return [[target, 'not run', '-']];
  if (r.cells.length === 0) return [[target, `not run: ${r.skipped.join('; ') || 'no cells'}`, '-']];
  return r.cells.map((c) => {
    const tp = c.sluice.perSec / c.envoy.perSec;
    const p99Ratio = c.sluice.p99Us / c.envoy.p99Us;
    const clean = c.sluice.errors === 0;
    return [
      `sluice serve vs envoyproxy/ratelimit (${where(c)}): requests/s >= ${fmtRatio(throughput)}, p99 <= ${fmtRatio(p99)}`,
      `${fmtRatio(tp)} req/s (${fmtInt(c.sluice.perSec)} vs ${fmtInt(c.envoy.perSec)}), p99 ${fmtRatio(p99Ratio)} (${ms(c.sluice.p99Us)} vs ${ms(c.envoy.p99Us)} ms)${clean ? '' : ', with errors'}`,
      tp >= throughput && p99Ratio <= p99 && clean ? 'PASS' : 'MISS',
    ];
  });
}
