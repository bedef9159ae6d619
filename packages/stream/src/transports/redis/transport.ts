/**
 * Event stream on Redis Streams: one stream per partition (`<prefix>:p:<n>`, capped with
 * `MAXLEN ~`), one consumer group per aggregator group, decisions over Redis pub/sub. Works on
 * a standalone Redis and on Redis Cluster (every command touches one key, so no hash tags).
 */
import type { ClusterOptions } from 'ioredis';
import { TransportError, TransportErrorCodes } from '../../errors.js';
import type { BatchHandler, EventTransport, Subscription } from '../../transport.js';
import {
  DEFAULT_MAX_BATCH_BYTES,
  DEFAULT_MAX_MESSAGE_BYTES,
  checkBound,
  checkName,
  checkPartition,
  checkPartitionCount,
  checkPayload,
  closedError,
  deliverDecision,
  hooksOf,
  unavailable,
  withTimeout,
  type TransportHooks,
} from '../common.js';
import { openRedis, whenReady, type RedisClient, type RedisConnectSettings, type RedisEndpoint } from './connect.js';
import { RedisStreamConsumer } from './consumer.js';

/** Options for {@link RedisStreamsTransport}. */
export interface RedisStreamsTransportOptions extends RedisEndpoint, TransportHooks {
  /** Number of partitions, 1..1024. */
  partitions: number;
  /** Key prefix, 1-64 characters of `[A-Za-z0-9_-]`. @default 'sluice-events' */
  prefix?: string;
  /** Approximate cap on batches kept per partition stream (`XADD MAXLEN ~`). @default 100000 */
  maxLen?: number;
  /** Batches read per XREADGROUP. @default 64 */
  readCount?: number;
  /** How long one blocking read waits for new batches, in ms. @default 1000 */
  blockMs?: number;
  /** Bound on one publish / broadcast / setup call, in ms. @default 2000 */
  commandTimeoutMs?: number;
  /** Publishes waiting for Redis at once; more reject with UNAVAILABLE. @default 1024 */
  maxInFlight?: number;
  /** Consumers at once (each holds one connection). @default 256 */
  maxConsumers?: number;
  /** First reconnect / retry delay, in ms. @default 100 */
  reconnectBaseMs?: number;
  /** Largest reconnect / retry delay, in ms. @default 5000 */
  reconnectMaxMs?: number;
  /** Largest accepted batch in bytes. @default 1048576 */
  maxBatchBytes?: number;
  /** Largest accepted decision message in bytes. @default 65536 */
  maxMessageBytes?: number;
  /** Extra options for Redis Cluster connections. */
  clusterOptions?: ClusterOptions;
}

/**
 * {@link EventTransport} on Redis Streams.
 *
 * @example
 * const transport = new RedisStreamsTransport({ partitions: 16, url: 'redis://127.0.0.1:6379' });
 */
export class RedisStreamsTransport implements EventTransport {
  readonly name = 'redis';
  readonly partitions: number;
  private readonly prefix: string;
  private readonly maxLen: number;
  private readonly readCount: number;
  private readonly blockMs: number;
  private readonly timeoutMs: number;
  private readonly maxInFlight: number;
  private readonly maxConsumers: number;
  private readonly maxBatchBytes: number;
  private readonly maxMessageBytes: number;
  private readonly hooks: TransportHooks;
  private readonly settings: RedisConnectSettings;
  private readonly pub: RedisClient;
  private sub: RedisClient | undefined;
  private subscribing: Promise<void> | undefined;
  private readonly decisionHandlers = new Set<(message: Uint8Array) => void>();
  private readonly consumers = new Set<RedisStreamConsumer>();
  private inFlight = 0;
  private closed = false;

  constructor(options: RedisStreamsTransportOptions) {
    this.partitions = checkPartitionCount(options.partitions);
    if ((options.url === undefined) === (options.clusterNodes === undefined)) {
      throw new TransportError(TransportErrorCodes.INVALID, 'exactly one of url and clusterNodes is required');
    }
    if (options.clusterNodes?.length === 0) throw new TransportError(TransportErrorCodes.INVALID, 'clusterNodes is empty');
    this.prefix = checkName('prefix', options.prefix ?? 'sluice-events');
    this.maxLen = checkBound('maxLen', options.maxLen, 100_000, 1, 100_000_000);
    this.readCount = checkBound('readCount', options.readCount, 64, 1, 10_000);
    this.blockMs = checkBound('blockMs', options.blockMs, 1_000, 1, 60_000);
    this.timeoutMs = checkBound('commandTimeoutMs', options.commandTimeoutMs, 2_000, 1, 600_000);
    this.maxInFlight = checkBound('maxInFlight', options.maxInFlight, 1_024, 1, 1_000_000);
    this.maxConsumers = checkBound('maxConsumers', options.maxConsumers, 256, 1, 4_096);
    this.maxBatchBytes = checkBound('maxBatchBytes', options.maxBatchBytes, DEFAULT_MAX_BATCH_BYTES, 1, 64 * 1024 * 1024);
    this.maxMessageBytes = checkBound('maxMessageBytes', options.maxMessageBytes, DEFAULT_MAX_MESSAGE_BYTES, 1, 16 * 1024 * 1024);
    const reconnectBaseMs = checkBound('reconnectBaseMs', options.reconnectBaseMs, 100, 1, 60_000);
    const reconnectMaxMs = checkBound('reconnectMaxMs', options.reconnectMaxMs, 5_000, reconnectBaseMs, 600_000);
    this.hooks = hooksOf(options);
    this.settings = {
      endpoint: { url: options.url, clusterNodes: options.clusterNodes, redisOptions: options.redisOptions },
      commandTimeoutMs: this.timeoutMs,
      reconnectBaseMs,
      reconnectMaxMs,
      // Connection errors surface through the calls that fail; the hook is for logs.
      onError: (err) => options.onConsumeError?.(err, -1),
    };
    this.pub = openRedis(this.settings, 'publish');
  }

  /** The stream key of a partition. */
  streamKey(partition: number): string {
    return `${this.prefix}:p:${partition}`;
  }

  private get channel(): string {
    return `${this.prefix}:decisions`;
  }

  async publish(partition: number, batch: Uint8Array): Promise<void> {
    if (this.closed) throw closedError(this.name);
    checkPartition(partition, this.partitions);
    checkPayload('batch', batch, this.maxBatchBytes);
    if (this.inFlight >= this.maxInFlight) {
      throw new TransportError(TransportErrorCodes.UNAVAILABLE, `more than ${this.maxInFlight} publishes in flight`);
    }
    this.inFlight++;
    try {
      await whenReady(this.pub, this.timeoutMs, 'publish');
      const data = Buffer.from(batch.buffer, batch.byteOffset, batch.byteLength);
      await withTimeout(
        this.pub.xadd(this.streamKey(partition), 'MAXLEN', '~', this.maxLen, '*', 'd', data),
        this.timeoutMs,
        'publish',
      );
    } catch (err) {
      throw this.closed ? closedError(this.name) : unavailable('publish', err);
    } finally {
      this.inFlight--;
    }
  }

  async consume(partition: number, group: string, handler: BatchHandler): Promise<Subscription> {
    if (this.closed) throw closedError(this.name);
    checkPartition(partition, this.partitions);
    checkName('group', group);
    if (this.consumers.size >= this.maxConsumers) {
      throw new TransportError(TransportErrorCodes.INVALID, `more than ${this.maxConsumers} consumers on one transport`);
    }
    const consumer = new RedisStreamConsumer({
      settings: this.settings,
      key: this.streamKey(partition),
      partition,
      group,
      handler,
      readCount: this.readCount,
      blockMs: this.blockMs,
      hooks: this.hooks,
      onStopped: () => this.consumers.delete(consumer),
    });
    this.consumers.add(consumer);
    try {
      await consumer.start();
    } catch (err) {
      await consumer.stop();
      throw this.closed ? closedError(this.name) : unavailable('consume', err);
    }
    return consumer;
  }

  async broadcast(message: Uint8Array): Promise<void> {
    if (this.closed) throw closedError(this.name);
    checkPayload('decision message', message, this.maxMessageBytes);
    try {
      await whenReady(this.pub, this.timeoutMs, 'broadcast');
      const data = Buffer.from(message.buffer, message.byteOffset, message.byteLength);
      await withTimeout(this.pub.publish(this.channel, data), this.timeoutMs, 'broadcast');
    } catch (err) {
      throw this.closed ? closedError(this.name) : unavailable('broadcast', err);
    }
  }

  async subscribeDecisions(handler: (message: Uint8Array) => void): Promise<Subscription> {
    if (this.closed) throw closedError(this.name);
    // One subscriber connection serves every local handler; it resubscribes after reconnects.
    if (!this.sub) {
      const sub = openRedis(this.settings, 'subscribe');
      this.sub = sub;
      sub.on('messageBuffer', (_channel: Buffer, message: Buffer) => {
        const bytes = new Uint8Array(message.buffer, message.byteOffset, message.byteLength);
        for (const h of [...this.decisionHandlers]) deliverDecision(h, bytes.slice(), this.hooks.onDecisionError);
      });
      this.subscribing = withTimeout(sub.subscribe(this.channel), this.timeoutMs, 'subscribe').then(() => undefined);
    }
    try {
      await this.subscribing;
    } catch (err) {
      // Let a later call try again on a fresh connection.
      this.sub?.disconnect();
      this.sub = undefined;
      throw this.closed ? closedError(this.name) : unavailable('subscribeDecisions', err);
    }
    if (this.closed) throw closedError(this.name);
    const own = (message: Uint8Array): void => handler(message);
    this.decisionHandlers.add(own);
    return {
      stop: async () => {
        this.decisionHandlers.delete(own);
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.decisionHandlers.clear();
    await Promise.all([...this.consumers].map((c) => c.stop()));
    this.sub?.disconnect();
    this.sub = undefined;
    this.pub.disconnect();
  }
}
