/* eslint-disable @typescript-eslint/no-explicit-any, @typescript-eslint/no-unsafe-member-access --
   RLS responses are read as @grpc/proto-loader decodes them */
/**
 * The quota part: gateways that decide each request locally by the assignments of Envoy's rate
 * limit quota service (RLQS), beside gateways that ask the rate limit service (RLS) for every
 * request, on one `sluice serve` and Redis, with the same offered load and the same rate. For
 * each: what the gateways admitted a second, the most admitted in any window of the limit against
 * the limit (the stated bound, docs/quota-service.md), and the server's CPU per million gateway
 * requests (read from /proc).
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { SimEnvoy, mostInWindow, type SimBucket } from './rlqs-envoy.js';
import { procCpu } from './service-children.js';
import { clockTicksPerSec } from './service-peers.js';
import { startService, type ServiceProcess } from './service-server.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

/** How the part runs. */
export interface QuotaSettings {
  readonly runId: string;
  readonly redisUrl: string;
  /** Simulated gateways, and the requests each is offered a second. */
  readonly gateways: number;
  readonly perGateway: number;
  /** The limit: `limit` a second (RLQS: `limit * windowSec` in a sliding window of `windowSec`). */
  readonly limit: number;
  readonly windowSec: number;
  /** RLQS: how often each gateway reports. */
  readonly reportingMs: number;
  readonly warmupMs: number;
  readonly measureMs: number;
}

/** The figures of one protocol. */
export interface QuotaRow {
  readonly protocol: 'RLQS' | 'RLS';
  readonly offeredPerSec: number;
  readonly admittedPerSec: number;
  /** The most admitted in any window of the limit, over the whole run. */
  readonly most: number;
  /** What a window of the limit admits. */
  readonly bound: number;
  /** Calls (RLS) or reports (RLQS) the service answered in the measured time. */
  readonly calls: number;
  /** Server CPU in the measured time, in seconds. */
  readonly cpuSec: number;
  /** Gateway requests offered in the measured time. */
  readonly requests: number;
}

export interface QuotaResult {
  readonly rows: readonly QuotaRow[];
  readonly settings: QuotaSettings;
}

const DOMAIN = 'edge';
const BUCKET = { name: 'bench' };
const PROTO_DIR = join(resolve(dirname(fileURLToPath(import.meta.url)), '../../..'), 'packages/server/proto');

function ruleFile(s: QuotaSettings): string {
  return JSON.stringify({
    resources: {
      'bench:quota': { limits: { algorithm: 'sliding-window', limit: s.limit * s.windowSec, windowMs: s.windowSec * 1000 } },
    },
    quota: [{ domain: DOMAIN, buckets: [{ bucket: BUCKET, resource: 'bench:quota' }] }],
    domains: [
      {
        domain: DOMAIN,
        descriptors: [{ key: 'name', value: BUCKET.name, rate_limit: { unit: 'second', requests_per_unit: s.limit } }],
      },
    ],
  });
}

/** One gateway's way of deciding a request: true when admitted (RLS: once the answer is in). */
interface Gateway {
  decide(now: number): void;
  tick(now: number): void;
  close(): void;
}

/** Runs `gateways` at their offered rate (owed by wall time) for `ms`; admissions' times go in `admitted`. */
async function drive(gateways: readonly Gateway[], perGateway: number, ms: number, onOffer: () => void): Promise<void> {
  const started = Date.now();
  let last = started;
  const owed = gateways.map(() => 0);
  while (Date.now() - started < ms) {
    const now = Date.now();
    const elapsed = now - last;
    last = now;
    for (const [i, g] of gateways.entries()) {
      owed[i]! += (perGateway * elapsed) / 1000;
      for (; owed[i]! >= 1; owed[i]!--) {
        onOffer();
        g.decide(now);
      }
      g.tick(now);
    }
    await sleep(5);
  }
}

async function cpuSeconds(pid: number): Promise<number> {
  const c = await procCpu(pid);
  return c === undefined ? NaN : (c.user + c.system) / clockTicksPerSec();
}

async function runProtocol(
  protocol: QuotaRow['protocol'],
  server: ServiceProcess,
  s: QuotaSettings,
  make: (admitted: number[], calls: { n: number }) => Gateway,
): Promise<QuotaRow> {
  const admitted: number[] = [];
  const calls = { n: 0 };
  const gateways = Array.from({ length: s.gateways }, () => make(admitted, calls));
  let offered = 0;
  try {
    await drive(gateways, s.perGateway, s.warmupMs, () => offered++);
    const from = { offered, calls: calls.n, admitted: admitted.length, cpu: await cpuSeconds(server.pid), at: Date.now() };
    await drive(gateways, s.perGateway, s.measureMs, () => offered++);
    const seconds = (Date.now() - from.at) / 1000;
    const cpuSec = (await cpuSeconds(server.pid)) - from.cpu;
    // RLS answers still on their way are not counted.
    const sorted = [...admitted].sort((a, b) => a - b);
    const windowMs = protocol === 'RLQS' ? s.windowSec * 1000 : 1000;
    return {
      protocol,
      offeredPerSec: (offered - from.offered) / seconds,
      admittedPerSec: sorted.filter((t) => t >= from.at).length / seconds,
      most: mostInWindow(sorted, windowMs),
      bound: (s.limit * windowMs) / 1000,
      calls: calls.n - from.calls,
      cpuSec,
      requests: offered - from.offered,
    };
  } finally {
    for (const g of gateways) g.close();
  }
}

/** A gateway on RLQS: the simulated Envoy, deciding locally. */
function rlqsGateway(server: ServiceProcess, s: QuotaSettings, admitted: number[], calls: { n: number }): Gateway {
  const envoy = new SimEnvoy(server.grpcTarget, DOMAIN);
  const bucket: SimBucket = envoy.bucket(1, BUCKET);
  let responses = 0;
  return {
    decide: (now) => {
      if (envoy.request(bucket, now)) admitted.push(now);
    },
    tick: (now) => {
      envoy.tick(now, s.reportingMs);
      calls.n += envoy.responses.length - responses;
      responses = envoy.responses.length;
    },
    close: () => envoy.close(),
  };
}

/** A gateway on RLS: one `ShouldRateLimit` per request, over a connection of its own. */
function rlsGateway(server: ServiceProcess, admitted: number[], calls: { n: number }): Gateway {
  const pkg = protoLoader.loadSync('envoy/service/ratelimit/v3/rls.proto', {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
    includeDirs: [PROTO_DIR],
  });
  const method = (pkg['envoy.service.ratelimit.v3.RateLimitService'] as protoLoader.ServiceDefinition).ShouldRateLimit!;
  const client = new grpc.Client(server.grpcTarget, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
  const request = { domain: DOMAIN, descriptors: [{ entries: [{ key: 'name', value: BUCKET.name }] }], hits_addend: 1 };
  let inFlight = 0;
  return {
    decide: () => {
      // A gateway that cannot get answers fast enough sheds the request rather than queue it.
      if (inFlight >= 256) return;
      inFlight++;
      client.makeUnaryRequest(method.path, method.requestSerialize, method.responseDeserialize, request, (err, res: any) => {
        inFlight--;
        if (err === null) calls.n++;
        if (err === null && res?.overall_code === 'OK') admitted.push(Date.now());
      });
    },
    tick: () => undefined,
    close: () => client.close(),
  };
}

/** Runs RLQS, then RLS, each on a fresh `sluice serve` on Redis. */
export async function runQuota(s: QuotaSettings, progress: (m: string) => void): Promise<QuotaResult> {
  const rows: QuotaRow[] = [];
  for (const protocol of ['RLQS', 'RLS'] as const) {
    progress(`  ${protocol}: ${s.gateways} gateways, ${s.perGateway} requests a second each...`);
    const server = await startService({ kind: 'redis', url: s.redisUrl, prefix: `sluice-bench:${s.runId}:quota:${protocol}:` }, [
      { name: 'rules.json', text: ruleFile(s) },
    ]);
    try {
      rows.push(
        await runProtocol(protocol, server, s, (admitted, calls) =>
          protocol === 'RLQS' ? rlqsGateway(server, s, admitted, calls) : rlsGateway(server, admitted, calls),
        ),
      );
    } finally {
      await server.stop();
    }
  }
  return { rows, settings: s };
}

export function quotaTable(r: QuotaResult): Table {
  const s = r.settings;
  const cpuPerMillion = (row: QuotaRow) => (row.cpuSec / row.requests) * 1e6;
  const rlqs = r.rows.find((x) => x.protocol === 'RLQS');
  const rls = r.rows.find((x) => x.protocol === 'RLS');
  return {
    title: `RLQS beside RLS: ${s.gateways} gateways offered ${fmtInt(s.gateways * s.perGateway)}/s against a limit of ${fmtInt(s.limit)}/s`,
    header: [
      'protocol',
      'offered/s',
      'admitted/s',
      'most in a window',
      'bound',
      'calls/s to the service',
      'server CPU s per 1M requests',
    ],
    rows: r.rows.map((row) => [
      row.protocol,
      fmtInt(row.offeredPerSec),
      fmtInt(row.admittedPerSec),
      `${fmtInt(row.most)} (${fmt(row.most / row.bound, 2)}x)`,
      fmtInt(row.bound),
      fmt(row.calls / (s.measureMs / 1000), 1),
      fmt(cpuPerMillion(row), 1),
    ]),
    notes: [
      `RLQS: one sluice serve on Redis; each gateway a simulated Envoy (its own connection) reporting every ${s.reportingMs} ms and deciding every request by its assignment; the limit a sliding window of ${fmtInt(s.limit * s.windowSec)} in ${s.windowSec} s ("most in a window" over ${s.windowSec} s windows).`,
      `RLS: the same rate as an Envoy descriptor (${fmtInt(s.limit)} a second, fixed windows: up to twice that in a 1 s window across a boundary); one ShouldRateLimit per request.`,
      `Measured over ${fmt(s.measureMs / 1000, 0)} s after ${fmt(s.warmupMs / 1000, 0)} s of warm-up; CPU of the server process from /proc.`,
      ...(rlqs !== undefined && rls !== undefined
        ? [`Server CPU per gateway request, RLS over RLQS: ${fmtRatio(cpuPerMillion(rls) / cpuPerMillion(rlqs))}.`]
        : []),
    ],
  };
}
