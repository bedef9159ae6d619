/**
 * Event stream on NATS JetStream: one stream (`<prefix>`) with one subject per partition
 * (`<prefix>.p.<n>`), one durable pull consumer per (group, partition), explicit acks.
 * Decisions go over a core NATS subject (`<prefix>.decisions`): fan-out to every subscriber,
 * nothing stored.
 */
import type { ConnectionOptions, JetStreamClient, JetStreamManager, NatsConnection } from 'nats';
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
import { nats } from './client.js';
import { NatsPartitionConsumer } from './consumer.js';

const { AckPolicy, DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType, connect, nanos } = nats;

/** Options for {@link NatsTransport}. */
export interface NatsTransportOptions extends TransportHooks {
  /** Number of partitions, 1..1024. */
  partitions: number;
  /** Server URLs, e.g. `nats://127.0.0.1:4222`. */
  servers: string | string[];
  /** Stream name and subject prefix, 1-64 characters of `[A-Za-z0-9_-]`. @default 'sluice-events' */
  prefix?: string;
  /** Batches kept per partition subject (`max_msgs_per_subject`; oldest dropped). @default 100000 */
  maxLen?: number;
  /** JetStream storage. @default 'file' */
  storage?: 'file' | 'memory';
  /** Batches fetched per pull request. @default 64 */
  readCount?: number;
  /** How long one pull request waits for batches, in ms (JetStream minimum 1000). @default 1000 */
  blockMs?: number;
  /** Bound on one publish / broadcast / setup call, in ms. @default 2000 */
  commandTimeoutMs?: number;
  /** Publishes waiting for their acknowledgement at once; more reject. @default 1024 */
  maxInFlight?: number;
  /** Consumers at once. @default 256 */
  maxConsumers?: number;
  /** Wait between reconnect attempts, in ms (the client adds jitter). @default 250 */
  reconnectWaitMs?: number;
  /** Largest retry delay of a failing consumer, in ms. @default 5000 */
  reconnectMaxMs?: number;
  /** How long an unacknowledged batch waits before redelivery, in ms. @default 30000 */
  ackWaitMs?: number;
  /** Largest accepted batch in bytes. @default 1048576 */
  maxBatchBytes?: number;
  /** Largest accepted decision message in bytes. @default 65536 */
  maxMessageBytes?: number;
  /** Extra nats.js connection options (credentials, TLS, ...). */
  connectionOptions?: Omit<ConnectionOptions, 'servers'>;
}

interface Session {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
}

/**
 * {@link EventTransport} on NATS JetStream. Connects on first use and reconnects forever (with
 * a fixed, jittered wait); calls made while the server is away reject after `commandTimeoutMs`.
 *
 * @example
 * const transport = new NatsTransport({ partitions: 16, servers: 'nats://127.0.0.1:4222' });
 */
export class NatsTransport implements EventTransport {
  readonly name = 'nats';
  readonly partitions: number;
  private readonly o: Required<Omit<NatsTransportOptions, keyof TransportHooks | 'connectionOptions' | 'servers'>>;
  private readonly servers: string[];
  private readonly hooks: TransportHooks;
  private readonly connectionOptions: Omit<ConnectionOptions, 'servers'>;
  private session: Promise<Session> | undefined;
  private readonly consumers = new Set<NatsPartitionConsumer>();
  private readonly decisionSubs = new Set<Subscription>();
  private inFlight = 0;
  private closed = false;

  constructor(options: NatsTransportOptions) {
    this.partitions = checkPartitionCount(options.partitions);
    this.servers = Array.isArray(options.servers) ? [...options.servers] : [options.servers];
    if (this.servers.length === 0 || this.servers.some((s) => typeof s !== 'string' || s === '')) {
      throw new TransportError(TransportErrorCodes.INVALID, 'servers must name at least one server');
    }
    const storage = options.storage ?? 'file';
    if (storage !== 'file' && storage !== 'memory')
      throw new TransportError(TransportErrorCodes.INVALID, `storage must be file or memory`);
    const reconnectWaitMs = checkBound('reconnectWaitMs', options.reconnectWaitMs, 250, 1, 60_000);
    this.o = {
      partitions: this.partitions,
      prefix: checkName('prefix', options.prefix ?? 'sluice-events'),
      maxLen: checkBound('maxLen', options.maxLen, 100_000, 1, 100_000_000),
      storage,
      readCount: checkBound('readCount', options.readCount, 64, 1, 10_000),
      blockMs: checkBound('blockMs', options.blockMs, 1_000, 1_000, 60_000),
      commandTimeoutMs: checkBound('commandTimeoutMs', options.commandTimeoutMs, 2_000, 1, 600_000),
      maxInFlight: checkBound('maxInFlight', options.maxInFlight, 1_024, 1, 1_000_000),
      maxConsumers: checkBound('maxConsumers', options.maxConsumers, 256, 1, 4_096),
      reconnectWaitMs,
      reconnectMaxMs: checkBound('reconnectMaxMs', options.reconnectMaxMs, 5_000, 1, 600_000),
      ackWaitMs: checkBound('ackWaitMs', options.ackWaitMs, 30_000, 1_000, 3_600_000),
      maxBatchBytes: checkBound('maxBatchBytes', options.maxBatchBytes, DEFAULT_MAX_BATCH_BYTES, 1, 64 * 1024 * 1024),
      maxMessageBytes: checkBound('maxMessageBytes', options.maxMessageBytes, DEFAULT_MAX_MESSAGE_BYTES, 1, 16 * 1024 * 1024),
    };
    this.hooks = hooksOf(options);
    this.connectionOptions = options.connectionOptions ?? {};
  }

  private subject(partition: number): string {
    return `${this.o.prefix}.p.${partition}`;
  }

  /** Connects once and makes sure the stream exists; a failed attempt is retried by the next call. */
  private connected(): Promise<Session> {
    this.session ??= this.open().catch((err: unknown) => {
      this.session = undefined;
      throw err;
    });
    return withTimeout(this.session, this.o.commandTimeoutMs, 'connect');
  }

  private async open(): Promise<Session> {
    const nc = await connect({
      ...this.connectionOptions,
      servers: this.servers,
      timeout: this.o.commandTimeoutMs,
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: this.o.reconnectWaitMs,
    });
    if (this.closed) {
      await nc.close();
      throw closedError(this.name);
    }
    try {
      const jsm = await nc.jetstreamManager({ timeout: this.o.commandTimeoutMs });
      await this.ensureStream(jsm);
      return { nc, jsm, js: nc.jetstream({ timeout: this.o.commandTimeoutMs }) };
    } catch (err) {
      await nc.close();
      throw err;
    }
  }

  private async ensureStream(jsm: JetStreamManager): Promise<void> {
    const config = {
      name: this.o.prefix,
      subjects: [`${this.o.prefix}.p.*`],
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.Old,
      storage: this.o.storage === 'memory' ? StorageType.Memory : StorageType.File,
      max_msgs_per_subject: this.o.maxLen,
      max_msg_size: this.o.maxBatchBytes,
    };
    try {
      await jsm.streams.info(this.o.prefix);
    } catch {
      await jsm.streams.add(config);
    }
  }

  async publish(partition: number, batch: Uint8Array): Promise<void> {
    if (this.closed) throw closedError(this.name);
    checkPartition(partition, this.partitions);
    checkPayload('batch', batch, this.o.maxBatchBytes);
    if (this.inFlight >= this.o.maxInFlight) {
      throw new TransportError(TransportErrorCodes.UNAVAILABLE, `more than ${this.o.maxInFlight} publishes in flight`);
    }
    this.inFlight++;
    try {
      const { js } = await this.connected();
      await withTimeout(
        js.publish(this.subject(partition), batch, { timeout: this.o.commandTimeoutMs }),
        this.o.commandTimeoutMs,
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
    if (this.consumers.size >= this.o.maxConsumers) {
      throw new TransportError(TransportErrorCodes.INVALID, `more than ${this.o.maxConsumers} consumers on one transport`);
    }
    try {
      const { js, jsm, nc } = await this.connected();
      const durable = `${group}_p${partition}`;
      await withTimeout(
        jsm.consumers.add(this.o.prefix, {
          durable_name: durable,
          filter_subject: this.subject(partition),
          ack_policy: AckPolicy.Explicit,
          // A new group starts at the oldest batch the stream still holds.
          deliver_policy: DeliverPolicy.All,
          ack_wait: nanos(this.o.ackWaitMs),
          max_ack_pending: Math.max(1_000, this.o.readCount * 4),
        }),
        this.o.commandTimeoutMs,
        'consume',
      );
      const pull = await withTimeout(js.consumers.get(this.o.prefix, durable), this.o.commandTimeoutMs, 'consume');
      if (this.closed) throw closedError(this.name);
      const consumer = new NatsPartitionConsumer({
        nc,
        consumer: pull,
        partition,
        handler,
        readCount: this.o.readCount,
        blockMs: this.o.blockMs,
        retryBaseMs: this.o.reconnectWaitMs,
        retryMaxMs: this.o.reconnectMaxMs,
        flushTimeoutMs: this.o.commandTimeoutMs,
        hooks: this.hooks,
        onStopped: () => this.consumers.delete(consumer),
      });
      this.consumers.add(consumer);
      consumer.start();
      return consumer;
    } catch (err) {
      throw this.closed ? closedError(this.name) : unavailable('consume', err);
    }
  }

  async broadcast(message: Uint8Array): Promise<void> {
    if (this.closed) throw closedError(this.name);
    checkPayload('decision message', message, this.o.maxMessageBytes);
    try {
      const { nc } = await this.connected();
      nc.publish(`${this.o.prefix}.decisions`, message);
      // Core NATS publishes are fire-and-forget; the flush round trip tells us the server has it.
      await withTimeout(nc.flush(), this.o.commandTimeoutMs, 'broadcast');
    } catch (err) {
      throw this.closed ? closedError(this.name) : unavailable('broadcast', err);
    }
  }

  async subscribeDecisions(handler: (message: Uint8Array) => void): Promise<Subscription> {
    if (this.closed) throw closedError(this.name);
    try {
      const { nc } = await this.connected();
      const natsSub = nc.subscribe(`${this.o.prefix}.decisions`, {
        callback: (err, msg) => {
          if (!err) deliverDecision(handler, msg.data, this.hooks.onDecisionError);
        },
      });
      const sub: Subscription = {
        stop: async () => {
          this.decisionSubs.delete(sub);
          if (!natsSub.isClosed()) natsSub.unsubscribe();
        },
      };
      this.decisionSubs.add(sub);
      // The subscription is active once the server has seen it.
      await withTimeout(nc.flush(), this.o.commandTimeoutMs, 'subscribeDecisions');
      return sub;
    } catch (err) {
      throw this.closed ? closedError(this.name) : unavailable('subscribeDecisions', err);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.consumers].map((c) => c.stop()));
    await Promise.all([...this.decisionSubs].map((s) => s.stop()));
    const session = this.session;
    this.session = undefined;
    if (session) {
      try {
        const { nc } = await session;
        await nc.close();
      } catch {
        // Never connected: nothing to close.
      }
    }
  }
}
