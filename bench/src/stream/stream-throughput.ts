/**
 * Event stream throughput per transport: batches of 100 events x 32 bytes published with a
 * bounded number in flight over all partitions for a fixed window, while one consumer group
 * reads every partition. Reports published and delivered events/s and publish latency; the
 * in-process transport is the reference the others are compared with.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { MemoryTransport, type EventTransport, type Subscription } from '@sluice/stream';
import { NatsTransport } from '@sluice/stream/nats';
import { RedisStreamsTransport } from '@sluice/stream/redis';
import { RocketMqTransport } from '@sluice/stream/rocketmq';
import { percentile } from '../service/service-measure.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

/** Events per batch and bytes per event, as the probe sends them. */
export const STREAM_BATCH = Object.freeze({ events: 100, eventBytes: 32 });

export interface StreamThroughputSettings {
  /** Standalone Redis URL; the Redis row is skipped without it. */
  readonly redisUrl?: string;
  /** NATS URL (e.g. from SLUICE_NATS_URL); the NATS row is skipped without it. */
  readonly natsUrl?: string;
  /** RocketMQ proxy endpoints (SLUICE_ROCKETMQ_ENDPOINTS); skipped without it. */
  readonly rocketMqEndpoints?: string;
  readonly partitions: number;
  /** Publishes in flight at once. */
  readonly inFlight: number;
  readonly warmupMs: number;
  readonly measureMs: number;
  /** Unique per run: stream names and groups. */
  readonly runId: string;
}

export interface StreamThroughputResult {
  readonly transport: string;
  readonly publishedBatches: number;
  readonly deliveredBatches: number;
  readonly seconds: number;
  readonly publishedEventsPerSec: number;
  readonly deliveredEventsPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly errors: number;
  readonly firstError: unknown;
}

/** The transports the settings make available, memory first. */
function transports(s: StreamThroughputSettings): [string, () => EventTransport][] {
  const prefix = `bench-${s.runId}`.replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 64);
  const list: [string, () => EventTransport][] = [['memory', () => new MemoryTransport({ partitions: s.partitions })]];
  if (s.redisUrl)
    list.push(['redis', () => new RedisStreamsTransport({ partitions: s.partitions, url: s.redisUrl!, prefix, maxLen: 10_000 })]);
  if (s.natsUrl)
    list.push(['nats', () => new NatsTransport({ partitions: s.partitions, servers: s.natsUrl!, prefix, maxLen: 10_000 })]);
  if (s.rocketMqEndpoints) {
    for (const mode of ['lite', 'topics'] as const) {
      list.push([
        `rocketmq ${mode}`,
        () => new RocketMqTransport({ mode, partitions: s.partitions, endpoints: s.rocketMqEndpoints!, prefix, awaitMs: 1_000 }),
      ]);
    }
  }
  return list;
}

/** Runs one transport: warm-up, then a measured window of publishing with `inFlight` loops. */
export async function runStreamCell(
  name: string,
  make: () => EventTransport,
  s: StreamThroughputSettings,
): Promise<StreamThroughputResult> {
  const transport = make();
  const subs: Subscription[] = [];
  let delivered = 0;
  let errors = 0;
  let firstError: unknown;
  const batch = randomBytes(STREAM_BATCH.events * STREAM_BATCH.eventBytes);
  try {
    for (let p = 0; p < s.partitions; p++) {
      subs.push(
        // The aggregators' group: RocketMQ's lite mode reads only through groups that exist
        // (scripts/rocketmq-server.sh creates this one); the other transports create groups.
        await transport.consume(p, 'sluice-aggregators', async () => {
          delivered++;
        }),
      );
    }
    let measuring = false;
    let stop = false;
    let published = 0;
    const latencies: number[] = [];
    let next = 0;
    const loop = async (): Promise<void> => {
      while (!stop) {
        const partition = next++ % s.partitions;
        const t0 = performance.now();
        try {
          await transport.publish(partition, batch);
          if (measuring) {
            published++;
            latencies.push(performance.now() - t0);
          }
        } catch (err) {
          errors++;
          firstError ??= err;
          await sleep(10);
        }
      }
    };
    const loops = Array.from({ length: s.inFlight }, () => loop());
    await sleep(s.warmupMs);
    const deliveredBefore = delivered;
    measuring = true;
    const start = performance.now();
    await sleep(s.measureMs);
    measuring = false;
    const seconds = (performance.now() - start) / 1000;
    const deliveredInWindow = delivered - deliveredBefore;
    stop = true;
    await Promise.all(loops);
    latencies.sort((a, b) => a - b);
    return {
      transport: name,
      publishedBatches: published,
      deliveredBatches: deliveredInWindow,
      seconds,
      publishedEventsPerSec: (published * STREAM_BATCH.events) / seconds,
      deliveredEventsPerSec: (deliveredInWindow * STREAM_BATCH.events) / seconds,
      p50Ms: percentile(latencies, 50),
      p99Ms: percentile(latencies, 99),
      errors,
      firstError,
    };
  } finally {
    await Promise.all(subs.map((sub) => sub.stop()));
    await transport.close();
  }
}

/** Runs every available transport in turn. */
export async function runStreamThroughput(s: StreamThroughputSettings): Promise<StreamThroughputResult[]> {
  const results: StreamThroughputResult[] = [];
  for (const [name, make] of transports(s)) results.push(await runStreamCell(name, make, s));
  return results;
}

/** The results as a table, each transport's delivered rate relative to the in-process one. */
export function streamThroughputTable(results: readonly StreamThroughputResult[], s: StreamThroughputSettings): Table {
  const memory = results.find((r) => r.transport === 'memory');
  return {
    title: `Event stream throughput (batches of ${STREAM_BATCH.events} x ${STREAM_BATCH.eventBytes} B, ${s.partitions} partitions, ${s.inFlight} publishes in flight)`,
    header: ['transport', 'published ev/s', 'delivered ev/s', 'vs memory', 'publish p50 ms', 'publish p99 ms', 'errors'],
    rows: results.map((r) => [
      r.transport,
      fmtInt(r.publishedEventsPerSec),
      fmtInt(r.deliveredEventsPerSec),
      memory ? fmtRatio(r.deliveredEventsPerSec / memory.deliveredEventsPerSec) : 'n/a',
      fmt(r.p50Ms, 2),
      fmt(r.p99Ms, 2),
      fmtInt(r.errors),
    ]),
    notes: [
      `Measured over ${fmt(s.measureMs / 1000)} s after ${fmt(s.warmupMs / 1000)} s of warm-up; one consumer group reads every partition in the same process.`,
      'Delivered counts batches handled in the window (a consumer that falls behind shows as delivered < published).',
      ...results.filter((r) => r.errors > 0).map((r) => `${r.transport}: first error: ${String(r.firstError)}`),
    ],
  };
}
