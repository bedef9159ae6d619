/**
 * Gateway overhead: what the gateway adds to each request in one process, measured against
 * the same handler without it. A request here is the node:http adapter's work without the
 * network: read the dimensions, hash them, check the decision cache, register the response-end
 * listener; and when the response ends, write the 32-byte event into the probe's batch. The
 * probe publishes real batches to an in-process sink between chunks, so its background cost
 * (sealing, promises) is inside the measured time too.
 */
import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Gateway } from '@sluice/gateway';
import { encodeDecisions, hashValue, type BatchHandler, type EventTransport, type Subscription } from '@sluice/stream';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

/** Settings of the gateway-overhead part. */
export interface GatewayOverheadOptions {
  /** Requests per cell and round. */
  readonly requests: number;
  /** Rounds; cells alternate within a round and the median round is reported. */
  readonly rounds: number;
  /** Requests between two yields to the event loop (lets the probe publish). @default 1000 */
  readonly chunk?: number;
}

/** One cell's figures. */
export interface GatewayOverheadCell {
  readonly name: string;
  /** Median CPU time per request over the rounds, ns. */
  readonly nsPerRequest: number;
  /** Median minus the bare handler's median, ns. */
  readonly overheadNs: number;
  /** Events the probe had sent at the end of the cell's rounds. */
  readonly eventsSent: number;
  /** Events dropped (all reasons). */
  readonly eventsDropped: number;
  /** Requests answered 429 by the gateway in the measured rounds. */
  readonly blocked: number;
}

export interface GatewayOverheadResult {
  readonly options: Required<GatewayOverheadOptions>;
  readonly cells: readonly GatewayOverheadCell[];
}

/** The response members the gateway and the handler touch, on a real EventEmitter. */
class BenchResponse extends EventEmitter {
  statusCode = 200;
  headersSent = false;
  writableFinished = false;
  setHeader(): this {
    return this;
  }
  writeHead(status: number): this {
    this.statusCode = status;
    this.headersSent = true;
    return this;
  }
  end(): this {
    this.headersSent = true;
    this.writableFinished = true;
    return this;
  }
  reset(): void {
    this.statusCode = 200;
    this.headersSent = false;
    this.writableFinished = false;
    this.removeAllListeners('close');
  }
}

/** A transport that accepts (or rejects) every batch at once and keeps nothing. */
class SinkTransport implements EventTransport {
  readonly name = 'sink';
  bytes = 0;
  constructor(
    readonly partitions: number,
    private readonly down = false,
  ) {}
  async publish(_partition: number, batch: Uint8Array): Promise<void> {
    if (this.down) throw new Error('stream down');
    this.bytes += batch.length;
  }
  consume(_p: number, _g: string, _h: BatchHandler): Promise<Subscription> {
    return Promise.reject(new Error('sink: no consumers'));
  }
  async broadcast(): Promise<void> {}
  async subscribeDecisions(): Promise<Subscription> {
    return { stop: async () => undefined };
  }
  async close(): Promise<void> {}
}

const POOL = 1024;

/** Requests of 1024 users from 256 addresses over 16 resources, each with a realistic header set. */
function requestPool(): IncomingMessage[] {
  return Array.from(
    { length: POOL },
    (_, i) =>
      ({
        url: `/api${i % 16}/items/${i}?page=2`,
        headers: {
          host: 'api.example.com',
          'user-agent': 'bench/1.0',
          accept: 'application/json',
          'x-user-id': `user-${i}`,
          'x-tenant': `tenant-${i % 8}`,
        },
        socket: { remoteAddress: `10.0.${i % 256}.${(i * 7) % 256}` },
      }) as unknown as IncomingMessage,
  );
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

interface Cell {
  readonly name: string;
  readonly handler: Handler;
  readonly gateway: Gateway | undefined;
}

function handlerBody(_req: IncomingMessage, res: ServerResponse): void {
  res.statusCode = 200;
  res.end();
}

async function runCell(
  cell: Cell,
  pool: IncomingMessage[],
  requests: number,
  chunk: number,
): Promise<{ ns: number; blocked: number }> {
  const responses = pool.map(() => new BenchResponse());
  let blocked = 0;
  // CPU time of this process, not wall time: on a shared machine other processes' load would
  // otherwise be counted as gateway overhead.
  const started = process.cpuUsage();
  for (let i = 0; i < requests;) {
    const end = Math.min(requests, i + chunk);
    for (; i < end; i++) {
      const slot = i & (POOL - 1);
      const res = responses[slot]!;
      cell.handler(pool[slot]!, res as unknown as ServerResponse);
      res.emit('close');
      if (res.statusCode === 429) blocked++;
      res.reset();
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  const { user, system } = process.cpuUsage(started);
  return { ns: ((user + system) * 1000) / requests, blocked };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** Runs the part: each cell `rounds` times, interleaved, after one warm-up round. */
export async function runGatewayOverhead(options: GatewayOverheadOptions): Promise<GatewayOverheadResult> {
  const o = { chunk: 1000, ...options };
  const pool = requestPool();
  const dimensions = { user: { header: 'x-user-id' }, tenant: { header: 'x-tenant' } };
  const probe = { batchSize: 100, flushIntervalMs: 10, maxBufferedEvents: 10_000 };
  const withProbe = new Gateway({ transport: new SinkTransport(8), probe, dimensions });
  const checkOnly = new Gateway({ dimensions });
  const crowded = new Gateway({ transport: new SinkTransport(8), probe, dimensions, cache: { maxEntries: 20_000 } });
  const now = Date.now();
  const blocks = Array.from({ length: 10_000 }, (_, i) => ({
    action: 'block' as const,
    dimension: (['user', 'ip', 'path', 'tenant'] as const)[i % 4]!,
    value: hashValue(`not-a-client-${i}`),
    ttlMs: 3_600_000,
    retryAfterMs: 1000,
    ruleId: 'bench',
    issuedAtMs: now,
  }));
  for (let i = 0; i < blocks.length; i += 1000) crowded.cache.applyMessage(encodeDecisions(blocks.slice(i, i + 1000)));
  const blocking = new Gateway({ dimensions });
  blocking.cache.applyMessage(
    encodeDecisions([
      {
        action: 'block',
        dimension: 'resource',
        value: hashValue('/api0'),
        ttlMs: 3_600_000,
        retryAfterMs: 1000,
        ruleId: 'bench',
        issuedAtMs: now,
      },
    ]),
  );
  const blockedPool = pool.map((r) => ({ ...r, url: '/api0/items/1' }) as unknown as IncomingMessage);
  const down = new Gateway({ transport: new SinkTransport(8, true), probe, dimensions });
  const cells: (Cell & { pool?: IncomingMessage[] })[] = [
    { name: 'bare handler', handler: handlerBody, gateway: undefined },
    { name: 'gateway, cache check only (no probe)', handler: checkOnly.wrap(handlerBody), gateway: checkOnly },
    { name: 'gateway, empty cache + probe', handler: withProbe.wrap(handlerBody), gateway: withProbe },
    { name: 'gateway, 10,000 blocks held (no match) + probe', handler: crowded.wrap(handlerBody), gateway: crowded },
    { name: 'gateway, stream down (events dropped)', handler: down.wrap(handlerBody), gateway: down },
    { name: 'gateway, blocked request (429)', handler: blocking.wrap(handlerBody), gateway: blocking, pool: blockedPool },
  ];
  const times = cells.map(() => [] as number[]);
  const blocked = cells.map(() => 0);
  for (const c of cells) await runCell(c, c.pool ?? pool, Math.min(o.requests, 100_000), o.chunk);
  for (let round = 0; round < o.rounds; round++) {
    for (const [i, c] of cells.entries()) {
      const r = await runCell(c, c.pool ?? pool, o.requests, o.chunk);
      times[i]!.push(r.ns);
      blocked[i]! += r.blocked;
    }
  }
  const results: GatewayOverheadCell[] = [];
  const bare = median(times[0]!);
  for (const [i, c] of cells.entries()) {
    const stats = c.gateway?.probe?.stats;
    const ns = median(times[i]!);
    results.push({
      name: c.name,
      nsPerRequest: ns,
      overheadNs: ns - bare,
      eventsSent: stats?.sent ?? 0,
      eventsDropped: stats === undefined ? 0 : Object.values(stats.dropped).reduce((a, b) => a + b, 0),
      blocked: blocked[i]!,
    });
  }
  for (const c of cells) await c.gateway?.close();
  return { options: o, cells: results };
}

/** The table of the gateway-overhead part. */
export function gatewayOverheadTable(r: GatewayOverheadResult): Table {
  const bare = r.cells[0]!.nsPerRequest;
  return {
    title: 'Gateway overhead: per request, in process, against the bare handler',
    header: ['cell', 'CPU ns/request', 'overhead ns', 'overhead us', 'x bare', 'events sent', 'events dropped', '429s'],
    rows: r.cells.map((c) => [
      c.name,
      fmt(c.nsPerRequest, 0),
      c === r.cells[0] ? '-' : fmt(c.overheadNs, 0),
      c === r.cells[0] ? '-' : fmt(c.overheadNs / 1000, 2),
      fmtRatio(c.nsPerRequest / bare),
      fmtInt(c.eventsSent),
      fmtInt(c.eventsDropped),
      fmtInt(c.blocked),
    ]),
    notes: [
      `CPU time of the process (user + system) per request, median of ${r.options.rounds} rounds of ${fmtInt(r.options.requests)} requests per`,
      `cell (cells interleaved, one warm-up round first), yielding to the event loop every ${fmtInt(r.options.chunk)} requests so the`,
      'probe publishes as it would under load. A request: the node:http adapter (`gateway.wrap`) over a handler that sets',
      'the status and ends, on request objects with 5 headers from 1024 users / 256 IPs / 16 resources, and a response',
      "EventEmitter whose 'close' is emitted after the handler (no sockets: HTTP parsing and I/O cost the same with or",
      'without the gateway). The probe batches 100 events or 10 ms into an in-process sink on 8 partitions. "stream',
      'down": every publish rejects and its events are counted as dropped. "blocked": every request hits a resource',
      'block and is answered 429 by the gateway (no handler, no event).',
    ],
  };
}
