/**
 * Sustained burst: the share of a long burst on one path that a gateway fleet lets through.
 * Three gateways (real node:http servers behind `@sluice/gateway`, each with its own stream
 * connection) and one aggregator; a threshold rule blocks the path above 200 requests a second
 * for `blockMs`; the load generator sends ~600 requests a second to the path for 3x `blockMs`
 * or more, spread over the gateways. Reported per transport (in-process; Redis Streams with
 * --redis or SLUICE_REDIS_URL; NATS JetStream and RocketMQ when SLUICE_NATS_URL and
 * SLUICE_ROCKETMQ_ENDPOINTS are set): the share of the burst answered 200 overall and after the
 * block reached each gateway, and how long the block took to reach every gateway and the lift
 * to follow the burst's end. The same fleet with rejection counting off (`countRejected:
 * false`, what gateways did before rejections were counted) is the peer row. */
import { Agent, createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Gateway } from '@sluice/gateway';
import { Aggregator, MemoryOwnershipStore } from '@sluice/governance';
import { MemoryTransport, hashValue, type EventTransport } from '@sluice/stream';
import { NatsTransport } from '@sluice/stream/nats';
import { RedisStreamsTransport } from '@sluice/stream/redis';
import { RocketMqTransport } from '@sluice/stream/rocketmq';
import { fmt, fmtInt, type Table } from '../report/table.js';

/** Settings of the sustained-burst part. */
export interface SustainedBurstSettings {
  readonly redisUrl?: string;
  readonly natsUrl?: string;
  readonly rocketMqEndpoints?: string;
  readonly runId: string;
  /** Requests per second offered to the path, over all gateways. */
  readonly rate: number;
  /** The rule's limit per second. */
  readonly limit: number;
  readonly blockMs: number;
  readonly burstMs: number;
}

/** Figures of one transport. */
export interface SustainedBurstResult {
  readonly transport: string;
  readonly countRejected: boolean;
  readonly sent: number;
  readonly passed: number;
  /** Requests sent to a gateway after it first answered 429, and how many of them passed. */
  readonly sentAfterBlock: number;
  readonly passedAfterBlock: number;
  /** Burst start -> every gateway has answered 429 once, ms (NaN if one never did). */
  readonly blockedEverywhereMs: number;
  /** Burst end -> no gateway holds the block any more, ms (NaN if not within 60 s). */
  readonly liftMs: number;
}

const GATEWAYS = 3;
const PERIOD_MS = 10;
const PATH = '/search';

type Make = () => EventTransport;

function transports(s: SustainedBurstSettings): [string, (cell: string) => { make: Make; close: () => Promise<void> }][] {
  const opened = (factory: (prefix: string) => EventTransport) => (cell: string) => {
    const made: EventTransport[] = [];
    const prefix = `bench-sb-${s.runId}-${cell}`.replace(/[^A-Za-z0-9_-]/g, '-');
    return {
      make: () => {
        const t = factory(prefix);
        made.push(t);
        return t;
      },
      close: async () => {
        for (const t of made) await t.close();
      },
    };
  };
  const list: [string, (cell: string) => { make: Make; close: () => Promise<void> }][] = [
    [
      'in-process',
      () => {
        const shared = new MemoryTransport({ partitions: 4, queueCapacity: 100_000 });
        return { make: () => shared, close: () => shared.close() };
      },
    ],
  ];
  if (s.redisUrl)
    list.push([
      'Redis Streams',
      opened((prefix) => new RedisStreamsTransport({ partitions: 4, url: s.redisUrl!, prefix, maxLen: 10_000 })),
    ]);
  if (s.natsUrl)
    list.push([
      'NATS JetStream',
      opened((prefix) => new NatsTransport({ partitions: 4, servers: s.natsUrl!, prefix, maxLen: 10_000, storage: 'memory' })),
    ]);
  if (s.rocketMqEndpoints)
    list.push([
      'RocketMQ',
      opened((prefix) => new RocketMqTransport({ partitions: 4, endpoints: s.rocketMqEndpoints!, prefix, awaitMs: 1_000 })),
    ]);
  return list;
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

function get(port: number): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: PATH, agent }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', () => resolve(0));
    });
    req.on('error', () => resolve(0));
    req.end();
  });
}

async function waitFor(done: () => boolean, limitMs: number): Promise<number | undefined> {
  const end = performance.now() + limitMs;
  while (performance.now() < end) {
    if (done()) return performance.now();
    await sleep(5);
  }
  return undefined;
}

async function runCell(
  name: string,
  make: Make,
  s: SustainedBurstSettings,
  countRejected: boolean,
): Promise<SustainedBurstResult | undefined> {
  const rules = {
    burst: {
      id: 'burst',
      type: 'threshold' as const,
      dimension: 'path' as const,
      match: { path: PATH },
      limit: s.limit,
      windowMs: 1000,
      slices: 10,
      blockMs: s.blockMs,
    },
  };
  const aggregator = new Aggregator({ transport: make(), rules, ownership: new MemoryOwnershipStore(), snapshotMs: 0 });
  const gateways: Gateway[] = [];
  const servers: Server[] = [];
  const ports: number[] = [];
  try {
    await aggregator.start();
    for (let i = 0; i < GATEWAYS; i++) {
      const g = new Gateway({ transport: make(), probe: { countRejected } });
      await g.start();
      const server = createServer(g.wrap((_req, res) => void res.end('ok')));
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      gateways.push(g);
      servers.push(server);
      ports.push((server.address() as AddressInfo).port);
    }
    // Until the aggregator reads the path (a new consumer group may take a while), then let the window drain.
    for (let i = 0; aggregator.stats().events === 0; i++) {
      if (i === 600) return undefined;
      await get(ports[0]!);
      await sleep(100);
    }
    await sleep(1500);

    const firstBlock = ports.map(() => Number.POSITIVE_INFINITY);
    let sent = 0;
    let passed = 0;
    let sentAfterBlock = 0;
    let passedAfterBlock = 0;
    const pending: Promise<void>[] = [];
    const start = performance.now();
    for (let now = start; now - start < s.burstMs; now = performance.now()) {
      // Paced by the clock, not by the loop: a late timer sends what is due at once.
      for (let due = Math.floor(((now - start) * s.rate) / 1000) - sent; due > 0; due--) {
        const i = sent++ % ports.length;
        const after = performance.now() > firstBlock[i]!;
        if (after) sentAfterBlock++;
        pending.push(
          get(ports[i]!).then((status) => {
            if (status === 200) {
              passed++;
              if (after) passedAfterBlock++;
            } else if (status === 429 && firstBlock[i] === Number.POSITIVE_INFINITY) firstBlock[i] = performance.now();
          }),
        );
      }
      await sleep(PERIOD_MS);
    }
    const end = performance.now();
    await Promise.all(pending);
    const hash = hashValue(PATH);
    const lifted = await waitFor(() => gateways.every((g) => g.cache.lookup('path', hash) === undefined), 60_000);
    return {
      transport: name,
      countRejected,
      sent,
      passed,
      sentAfterBlock,
      passedAfterBlock,
      blockedEverywhereMs: Math.max(...firstBlock) - start,
      liftMs: lifted === undefined ? Number.NaN : lifted - end,
    };
  } finally {
    for (const server of servers) {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
    for (const g of gateways) await g.close();
    await aggregator.close();
  }
}

/** Runs every transport the settings give, with rejection counting, then the peer rows without it. */
export async function runSustainedBurst(
  s: SustainedBurstSettings,
  progress: (line: string) => void,
): Promise<SustainedBurstResult[]> {
  const results: SustainedBurstResult[] = [];
  const list = transports(s);
  const cells: [string, (typeof list)[number][1], boolean][] = list.map(([n, f]) => [n, f, true]);
  // The peer: the same burst without counting rejections, on the transports that are cheap to run.
  for (const [n, f] of list.slice(0, 2)) cells.push([n, f, false]);
  for (const [name, factory, countRejected] of cells) {
    progress(`  sustained burst over ${name}${countRejected ? '' : ' (rejections not counted)'}...`);
    const t = factory(`${results.length}`);
    try {
      const r = await runCell(name, t.make, s, countRejected);
      if (r === undefined) progress(`  ${name}: the aggregator read nothing within 60 s; skipped`);
      else results.push(r);
    } finally {
      await t.close();
    }
  }
  return results;
}

/** The part as `npm run bench` runs it: the scenario users reported (600/s for 12 s, block 5 s), shorter when quick. */
export async function sustainedBurstPart(
  quick: boolean,
  redisUrl: string | undefined,
  runId: string,
  progress: (line: string) => void,
  print: (table: Table) => void,
): Promise<void> {
  progress('sustained burst...');
  const settings: SustainedBurstSettings = {
    redisUrl,
    natsUrl: process.env.SLUICE_NATS_URL,
    rocketMqEndpoints: process.env.SLUICE_ROCKETMQ_ENDPOINTS,
    runId,
    rate: 600,
    limit: 200,
    blockMs: quick ? 2000 : 5000,
    burstMs: quick ? 6000 : 15_000,
  };
  print(sustainedBurstTable(await runSustainedBurst(settings, progress), settings));
}

const pct = (part: number, whole: number) => (whole === 0 ? 'n/a' : `${fmt((100 * part) / whole, 2)} %`);

/** The part's table. */
export function sustainedBurstTable(results: readonly SustainedBurstResult[], s: SustainedBurstSettings): Table {
  return {
    title: 'Sustained burst: share of the burst that passes, after the block reached the gateway and overall',
    header: [
      'transport',
      'rejections counted',
      'sent',
      'passed',
      'passed overall',
      'sent after block',
      'passed after block',
      'blocked everywhere ms',
      'lift after end ms',
    ],
    rows: results.map((r) => [
      r.transport,
      r.countRejected ? 'yes' : 'no (peer)',
      fmtInt(r.sent),
      fmtInt(r.passed),
      pct(r.passed, r.sent),
      fmtInt(r.sentAfterBlock),
      pct(r.passedAfterBlock, r.sentAfterBlock),
      Number.isFinite(r.blockedEverywhereMs) ? fmt(r.blockedEverywhereMs) : 'never',
      Number.isFinite(r.liftMs) ? fmt(r.liftMs) : 'not in 60 s',
    ]),
    notes: [
      `${GATEWAYS} gateways (node:http), 1 aggregator (tick 100 ms), 4 partitions; rule: over ${s.limit} requests/s on ${PATH}, block ${s.blockMs} ms;`,
      `~${s.rate} requests/s on ${PATH} for ${s.burstMs} ms. "After block": requests a gateway received after it first answered 429.`,
      'Lift: burst end -> no gateway holds the block (the window drains for 1 s, then the next tick lifts; near 0 when',
      'the block had lapsed before the burst ended).',
    ],
  };
}
