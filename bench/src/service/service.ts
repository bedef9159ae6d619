/**
 * The service part: decisions per second and latency through `sluice serve`'s HTTP JSON API
 * (one item per call, and batches) and its Envoy gRPC API, against the same limit decided by
 * `Limiter.try` in one process, on the embedded store and on Redis. See bench/README.md.
 */
import { spawnSync } from 'node:child_process';
import { Limiter, type LimiterObserver } from '@sluice/core';
import { createPrometheusObserver } from '@sluice/core/metrics';
import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { sluiceDecider, type Decider } from '../harness/contenders.js';
import { machineCpu, procCpu } from './service-children.js';
import { PROTO_DIR, runLoadProcesses, type LoadConfig, type LoadTotals } from './service-load.js';
import { coresUsed, percentile, wrkErrors } from './service-measure.js';
import { SERVICE_POLICY, SERVICE_RULES, startService, type ServiceProcess, type ServiceStore } from './service-server.js';
import { runWrk } from './service-wrk.js';
import { readRedisStats, type RedisStats } from '../harness/redis-stats.js';
import { fmtInt } from '../report/table.js';
import { closedLoop } from '../redis/throughput.js';

/** How the service part runs. */
export interface ServiceSettings {
  readonly runId: string;
  /** The Redis of the `--redis` cells. */
  readonly redisUrl: string;
  readonly warmupMs: number;
  readonly measureMs: number;
  /** Distinct keys the calls cycle through. */
  readonly keys: number;
  /** Calls in flight of the in-process, single-item HTTP and gRPC cells. */
  readonly inFlight: number;
  /** Items per batch call, and batch calls in flight. */
  readonly batch: number;
  readonly batchInFlight: number;
  /** Node load processes of the gRPC cells (and of the HTTP cells without wrk). */
  readonly loadProcesses: number;
  /** The wrk binary; undefined: HTTP load from Node processes (undici). */
  readonly wrk: string | undefined;
}

/** `in-process + metrics`: the in-process peer with the Prometheus observer `sluice serve` decides with. */
export type ServiceApi = 'in-process' | 'in-process + metrics' | 'HTTP' | 'HTTP batch' | 'gRPC';

/** One cell: a store, an API, the load that drove it and what it measured. */
export interface ServiceCell {
  readonly store: 'embedded' | 'redis';
  readonly api: ServiceApi;
  /** What generated the load. */
  readonly load: string;
  readonly callsInFlight: number;
  readonly itemsPerCall: number;
  readonly callsPerSec: number;
  readonly decisionsPerSec: number;
  /** Per call, microseconds. */
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  /** Cores used over the measured window (1 = one core busy); NaN where unknown. */
  readonly serverCores: number;
  readonly loadCores: number;
  readonly redisCores: number;
  /** Cores the rest of the machine used meanwhile (other processes, the kernel). */
  readonly otherCores: number;
  /** Decisions the server counted over the run, over those the clients completed (about 1). */
  readonly serverCounted: number;
  /** Decisions answered by the store-failure policy (Redis over the store timeout). */
  readonly fallbacks: number;
  readonly errors: number;
  readonly firstError: string | undefined;
}

/** CPU times of the server, the machine and Redis at one instant. */
interface Sample {
  readonly at: number;
  readonly serverTicks: number | undefined;
  readonly machineTicks: number | undefined;
  readonly redis: RedisStats | undefined;
}

let clockTicks: number | undefined;

/** CLK_TCK, the unit of /proc CPU times (100 on Linux unless told otherwise). */
function ticksPerSec(): number {
  if (clockTicks === undefined) {
    const n = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout?.trim());
    clockTicks = Number.isInteger(n) && n > 0 ? n : 100;
  }
  return clockTicks;
}

async function sample(server: ServiceProcess | undefined, admin: Redis | undefined): Promise<Sample> {
  const at = performance.now();
  const [cpu, machine, redis] = await Promise.all([
    server === undefined ? undefined : procCpu(server.pid),
    machineCpu(),
    admin === undefined ? undefined : readRedisStats(admin),
  ]);
  return {
    at,
    serverTicks: cpu === undefined ? undefined : cpu.user + cpu.system,
    machineTicks: machine?.busy,
    redis,
  };
}

interface Window {
  readonly seconds: number;
  readonly serverCores: number;
  readonly machineCores: number;
  readonly redisCores: number;
}

function window(a: Sample, b: Sample): Window {
  const seconds = (b.at - a.at) / 1000;
  return {
    seconds,
    serverCores:
      a.serverTicks === undefined || b.serverTicks === undefined
        ? NaN
        : coresUsed(b.serverTicks - a.serverTicks, seconds, ticksPerSec()),
    machineCores:
      a.machineTicks === undefined || b.machineTicks === undefined
        ? NaN
        : coresUsed(b.machineTicks - a.machineTicks, seconds, ticksPerSec()),
    redisCores: a.redis === undefined || b.redis === undefined ? NaN : (b.redis.cpuSec - a.redis.cpuSec) / seconds,
  };
}

function errorText(err: unknown): string {
  if (err instanceof Error) return err.message;
  return typeof err === 'string' ? err : (JSON.stringify(err) ?? 'unknown error');
}

/** The server's decision counters, read while no load runs (a loaded server would answer late). */
interface Counted {
  readonly decisions: number;
  readonly fallbacks: number;
}

async function counted(server: ServiceProcess): Promise<Counted> {
  const c = await server.counters();
  return { decisions: c.allowed + c.denied, fallbacks: c.fallbacks };
}

function countedSince(a: Counted, b: Counted): Counted {
  return { decisions: b.decisions - a.decisions, fallbacks: b.fallbacks - a.fallbacks };
}

/** What the rest of the machine used: all busy cores less the ones accounted for (NaN ones count 0). */
function others(machineCores: number, ...ours: number[]): number {
  return machineCores - ours.reduce((t, n) => t + (Number.isFinite(n) ? n : 0), 0);
}

/** The in-process peer: the same limit decided by `Limiter.try` on the embedded store. */
function embeddedDecider(observer: LimiterObserver | undefined): Decider {
  const limiter = new Limiter({
    resources: { [SERVICE_RULES.resource]: { limits: SERVICE_POLICY } },
    ...(observer === undefined ? {} : { observer }),
  });
  return {
    decide: async (key) => (await limiter.try(SERVICE_RULES.resource, { key })).allowed,
    close: () => limiter.close(),
  };
}

/**
 * The in-process peer; with `metrics`, its limiter has the Prometheus observer (decisions counted
 * and timed, store calls timed) on a registry of its own, as `sluice serve`'s has: the row's
 * ratio to the plain one is what the metrics cost a decision.
 */
async function inProcessCell(
  s: ServiceSettings,
  store: 'embedded' | 'redis',
  admin: Redis | undefined,
  metrics: boolean,
): Promise<ServiceCell> {
  const observer = metrics ? createPrometheusObserver({ registry: new Registry() }) : undefined;
  const decider =
    store === 'embedded'
      ? embeddedDecider(observer)
      : await sluiceDecider(s.redisUrl, `bench:${s.runId}:svc${metrics ? ':m' : ''}`, SERVICE_POLICY, {
          ...(observer === undefined ? {} : { observer }),
        });
  try {
    const before = await sample(undefined, admin);
    const cpu = process.cpuUsage();
    const r = await closedLoop(decider, (n) => `k${n % s.keys}`, s.inFlight, s.warmupMs, s.measureMs);
    const used = process.cpuUsage(cpu);
    const win = window(before, await sample(undefined, admin));
    const cores = (used.user + used.system) / 1e6 / win.seconds;
    return {
      store,
      api: metrics ? 'in-process + metrics' : 'in-process',
      load: 'this process',
      callsInFlight: s.inFlight,
      itemsPerCall: 1,
      callsPerSec: r.perSec,
      decisionsPerSec: r.perSec,
      p50: r.p50,
      p99: r.p99,
      p999: r.p999,
      serverCores: cores,
      loadCores: NaN,
      redisCores: win.redisCores,
      otherCores: others(win.machineCores, cores, win.redisCores),
      serverCounted: NaN,
      fallbacks: 0,
      errors: r.errors,
      firstError: r.firstError === undefined ? undefined : errorText(r.firstError),
    };
  } finally {
    await decider.close();
  }
}

async function wrkCell(
  s: ServiceSettings,
  wrk: string,
  store: 'embedded' | 'redis',
  server: ServiceProcess,
  admin: Redis | undefined,
  batch: number,
): Promise<ServiceCell> {
  const connections = batch === 0 ? s.inFlight : s.batchInFlight;
  const run = { url: server.url, resource: SERVICE_RULES.resource, keys: s.keys, batch, connections };
  await runWrk(wrk, { ...run, seconds: Math.max(1, Math.round(s.warmupMs / 1000)) }, ticksPerSec());
  const counts = await counted(server);
  const before = await sample(server, admin);
  const w = await runWrk(wrk, { ...run, seconds: Math.max(1, Math.round(s.measureMs / 1000)) }, ticksPerSec());
  const win = window(before, await sample(server, admin));
  const byServer = countedSince(counts, await counted(server));
  const items = Math.max(1, batch);
  const seconds = w.report.durationUs / 1e6;
  const errors = wrkErrors(w.report);
  const loadCores = w.cpuSec === undefined ? NaN : w.cpuSec / w.seconds;
  return {
    store,
    api: batch === 0 ? 'HTTP' : 'HTTP batch',
    load: 'wrk, 1 thread',
    callsInFlight: connections,
    itemsPerCall: items,
    callsPerSec: w.report.requests / seconds,
    decisionsPerSec: (w.report.requests * items) / seconds,
    p50: w.report.p50Us,
    p99: w.report.p99Us,
    p999: w.report.p999Us,
    serverCores: win.serverCores,
    loadCores,
    redisCores: win.redisCores,
    otherCores: others(win.machineCores, win.serverCores, loadCores, win.redisCores),
    serverCounted: w.report.requests === 0 ? NaN : byServer.decisions / (w.report.requests * items),
    fallbacks: byServer.fallbacks,
    errors,
    firstError: errors === 0 ? undefined : `wrk: ${JSON.stringify(w.report.errors)}`,
  };
}

const LOAD_NAMES: Record<LoadConfig['kind'], string> = {
  grpc: '@grpc/grpc-js',
  'grpc-h2': 'node:http2, gRPC frames',
  http: 'undici',
};

async function nodeCell(
  s: ServiceSettings,
  api: 'HTTP' | 'HTTP batch' | 'gRPC',
  kind: LoadConfig['kind'],
  store: 'embedded' | 'redis',
  server: ServiceProcess,
  admin: Redis | undefined,
): Promise<ServiceCell> {
  const batch = api === 'HTTP batch' ? s.batch : 0;
  const callsInFlight = api === 'HTTP batch' ? s.batchInFlight : s.inFlight;
  const processes = Math.max(1, Math.min(s.loadProcesses, callsInFlight));
  const samples: Promise<Sample>[] = [];
  const counts = await counted(server);
  let totals: LoadTotals;
  try {
    totals = await runLoadProcesses(
      processes,
      {
        kind,
        target: api === 'gRPC' ? server.grpcTarget : server.url,
        inFlight: Math.ceil(callsInFlight / processes),
        keys: Math.ceil(s.keys / processes),
        batch,
        resource: SERVICE_RULES.resource,
        domain: SERVICE_RULES.domain,
        descriptorKey: SERVICE_RULES.descriptorKey,
        protoDir: PROTO_DIR,
      },
      s.warmupMs,
      s.measureMs,
      () => {
        const at = (ms: number) => new Promise<void>((r) => setTimeout(r, ms)).then(() => sample(server, admin));
        samples.push(at(s.warmupMs), at(s.warmupMs + s.measureMs));
      },
    );
  } finally {
    await Promise.allSettled(samples);
  }
  const [a, b] = await Promise.all(samples);
  const win = window(a!, b!);
  const byServer = countedSince(counts, await counted(server));
  const items = Math.max(1, batch);
  const seconds = totals.seconds;
  return {
    store,
    api,
    load: `${processes} Node processes (${LOAD_NAMES[kind]})`,
    callsInFlight: Math.ceil(callsInFlight / processes) * processes,
    itemsPerCall: items,
    callsPerSec: totals.calls / seconds,
    decisionsPerSec: (totals.calls * items) / seconds,
    p50: percentile(totals.latenciesUs, 50),
    p99: percentile(totals.latenciesUs, 99),
    p999: percentile(totals.latenciesUs, 99.9),
    serverCores: win.serverCores,
    loadCores: totals.cpuSec / seconds,
    redisCores: win.redisCores,
    otherCores: others(win.machineCores, win.serverCores, totals.cpuSec / seconds, win.redisCores),
    serverCounted: totals.completed === 0 ? NaN : byServer.decisions / (totals.completed * items),
    fallbacks: byServer.fallbacks,
    errors: totals.errors,
    firstError: totals.firstError,
  };
}

/** Deletes the keys a server wrote under its Redis prefix (rule versions, peers, limits). */
async function dropPrefix(admin: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    if (keys.length > 0) await admin.del(...keys);
    cursor = next;
  } while (cursor !== '0');
}

/**
 * Runs every cell: per store, the in-process peer first (nothing else running), without and
 * with the Prometheus observer, then
 * `sluice serve` started for that store and driven over HTTP (one item, then batches) and gRPC.
 * Every process started is stopped, on failure too.
 */
export async function runService(
  s: ServiceSettings,
  between: () => Promise<void>,
  progress: (line: string) => void,
): Promise<ServiceCell[]> {
  const cells: ServiceCell[] = [];
  const note = (c: ServiceCell) => {
    progress(`  ${c.store.padEnd(8)} ${c.api.padEnd(20)} ${c.load.padEnd(40)} ${fmtInt(c.decisionsPerSec)} decisions/s`);
    cells.push(c);
  };
  const admin = new Redis(s.redisUrl, { lazyConnect: true });
  // On a stop by signal the Redis goes first; its reconnect errors are not the run's.
  admin.on('error', () => undefined);
  try {
    await admin.connect();
    for (const store of ['embedded', 'redis'] as const) {
      const redis = store === 'redis' ? admin : undefined;
      for (const metrics of [false, true]) {
        await between();
        note(await inProcessCell(s, store, redis, metrics));
      }
      const prefix = `sluice-bench:${s.runId}:svc:`;
      const where: ServiceStore = store === 'embedded' ? { kind: 'embedded' } : { kind: 'redis', url: s.redisUrl, prefix };
      const server = await startService(where);
      try {
        for (const api of ['HTTP', 'HTTP batch'] as const) {
          await between();
          if (s.wrk !== undefined) note(await wrkCell(s, s.wrk, store, server, redis, api === 'HTTP' ? 0 : s.batch));
          else note(await nodeCell(s, api, 'http', store, server, redis));
        }
        for (const kind of ['grpc', 'grpc-h2'] as const) {
          await between();
          note(await nodeCell(s, 'gRPC', kind, store, server, redis));
        }
      } finally {
        await server.stop();
        if (store === 'redis') await dropPrefix(admin, prefix);
      }
    }
    return cells;
  } finally {
    admin.disconnect();
  }
}
