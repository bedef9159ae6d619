/**
 * Event stream on Apache RocketMQ 5 through its gRPC proxy, spoken over RocketMQ's published v2
 * gRPC protocol (see docs/transports.md, "RocketMQ").
 *
 * - `mode: 'lite'` (default): partitions are lite topics `<prefix>-p-<n>` of one LITE parent
 *   topic (`topicPrefix`); a consumer group holds one lite subscription per partition it reads,
 *   and ownership moves with subscribe / unsubscribe. Groups must exist, bound to the parent and
 *   exclusive (`scripts/rocketmq-server.sh groups <names>` creates them).
 * - `mode: 'topics'`: one normal topic per partition (`<topicPrefix>-p-<n>`), groups
 *   `<prefix>_<group>` that the broker creates on first use.
 *
 * Decisions go on one normal topic, read by a group of its own per subscriber (every group gets
 * every message: fan-out), named after `subscriberId` when one is given.
 */
import { randomBytes } from 'node:crypto';
import { TransportError, TransportErrorCodes } from '../../errors.js';
import type { BatchHandler, EventTransport, Subscription } from '../../transport.js';
import {
  DEFAULT_MAX_MESSAGE_BYTES,
  checkBound,
  checkName,
  checkPartition,
  checkPartitionCount,
  checkPayload,
  closedError,
  deliverDecision,
  hooksOf,
  runHandler,
  unavailable,
  type TransportHooks,
} from '../common.js';
import { MessagingService, grpc, type MessagingClient } from './client.js';
import { GroupConsumer, type ConsumerSettings } from './consumer.js';
import { HOST, RocketMqSession } from './session.js';

/** Longest lite topic name the proxy accepts (its `maxLiteTopicSize`). */
const MAX_LITE_TOPIC = 64;

/** Options for {@link RocketMqTransport}. */
export interface RocketMqTransportOptions extends TransportHooks {
  /** Number of partitions, 1..1024. */
  partitions: number;
  /** Proxy gRPC endpoint, `host:port`, e.g. `127.0.0.1:8081`. */
  endpoints: string;
  /**
   * `lite`: partitions are lite topics `<prefix>-p-<n>` of the LITE topic `topicPrefix`.
   * `topics`: partitions are normal topics `<topicPrefix>-p-<n>`.
   * @default 'lite'
   */
  mode?: 'lite' | 'topics';
  /** The LITE parent topic (lite), or the partition topics' prefix (topics). Must exist. @default 'sluice-events' */
  topicPrefix?: string;
  /** Topic for decisions. @default 'sluice-decisions' */
  decisionsTopic?: string;
  /**
   * A name for this process that stays the same across its restarts (a pod name of a stateful
   * set, a host name): decision subscriptions then read through groups named after it,
   * `<prefix>_d_<subscriberId>_<n>` for the transport's n-th subscription, which a restarted
   * process takes up again. Without it, each subscription reads through a new group, which stays
   * on the broker after it stops (the protocol cannot delete a group). Two live processes must
   * never share one: each would get only part of the decisions.
   */
  subscriberId?: string;
  /** Logical stream name: message tag, lite topic prefix (lite), consumer group prefix (topics). @default 'sluice' */
  prefix?: string;
  /** Batches per receive call (RocketMQ allows at most 32). @default 32 */
  readCount?: number;
  /**
   * Long-polling wait of one receive call, in ms; a stopping consumer waits for it. The proxy
   * rejects waits below its `grpcClientConsumerMinLongPollingTimeoutMillis`.
   * @default 5000
   */
  awaitMs?: number;
  /** How long a received, unacknowledged batch stays invisible before redelivery, in ms. @default 15000 */
  invisibleMs?: number;
  /** Bound on one publish / broadcast / setup call, in ms. @default 3000 */
  commandTimeoutMs?: number;
  /**
   * Bound on registering a producer or consumer session with the proxy (its first call), in ms.
   * A proxy that has just started can take seconds to answer its first clients.
   * @default 10000
   */
  connectTimeoutMs?: number;
  /** Publishes waiting for the proxy at once; more reject. @default 1024 */
  maxInFlight?: number;
  /** Partition consumers and decision subscriptions at once. @default 64 */
  maxConsumers?: number;
  /** First / largest retry delay of a failing consumer, in ms. @default 100 / 5000 */
  retryBaseMs?: number;
  retryMaxMs?: number;
  /** Largest accepted batch in bytes (the broker's default body limit is 4 MiB). @default 1048576 */
  maxBatchBytes?: number;
  /** Largest accepted decision message in bytes. @default 65536 */
  maxMessageBytes?: number;
}

type Compiled = Required<Omit<RocketMqTransportOptions, keyof TransportHooks>>;

let messages = 0;
/** A message id: 8 random bytes drawn once per process, then a counter. */
const ID_STEM = randomBytes(8).toString('hex').toUpperCase();
function messageId(): string {
  return `${ID_STEM}${(messages++).toString(16).toUpperCase().padStart(16, '0')}`;
}

/**
 * {@link EventTransport} on Apache RocketMQ 5 (gRPC proxy).
 *
 * @example
 * const transport = new RocketMqTransport({ partitions: 16, endpoints: '127.0.0.1:8081' });
 */
export class RocketMqTransport implements EventTransport {
  readonly name = 'rocketmq';
  readonly partitions: number;
  private readonly o: Compiled;
  private readonly hooks: TransportHooks;
  private client: MessagingClient | undefined;
  private producer: Promise<RocketMqSession> | undefined;
  /** Lite mode: one consumer per group, holding that group's partitions. */
  private readonly lite = new Map<string, Promise<GroupConsumer>>();
  /** Topics mode and decisions: one consumer per subscription. */
  private readonly plain = new Set<GroupConsumer>();
  private subscriptions = 0;
  private decisionSubscriptions = 0;
  private inFlight = 0;
  private closed = false;

  constructor(options: RocketMqTransportOptions) {
    this.partitions = checkPartitionCount(options.partitions);
    if (typeof options.endpoints !== 'string' || !/^[^\s:]+:\d{1,5}$/.test(options.endpoints)) {
      throw new TransportError(TransportErrorCodes.INVALID, 'endpoints must be host:port, e.g. 127.0.0.1:8081');
    }
    const mode = options.mode ?? 'lite';
    if (mode !== 'lite' && mode !== 'topics') {
      throw new TransportError(TransportErrorCodes.INVALID, `mode must be 'lite' or 'topics', got ${JSON.stringify(mode)}`);
    }
    const retryBaseMs = checkBound('retryBaseMs', options.retryBaseMs, 100, 1, 60_000);
    this.o = {
      partitions: this.partitions,
      endpoints: options.endpoints,
      mode,
      topicPrefix: checkName('topicPrefix', options.topicPrefix ?? 'sluice-events'),
      decisionsTopic: checkName('decisionsTopic', options.decisionsTopic ?? 'sluice-decisions'),
      subscriberId: options.subscriberId === undefined ? '' : checkName('subscriberId', options.subscriberId),
      prefix: checkName('prefix', options.prefix ?? 'sluice'),
      readCount: checkBound('readCount', options.readCount, 32, 1, 32),
      awaitMs: checkBound('awaitMs', options.awaitMs, 5_000, 100, 30_000),
      invisibleMs: checkBound('invisibleMs', options.invisibleMs, 15_000, 10_000, 12 * 3_600_000),
      commandTimeoutMs: checkBound('commandTimeoutMs', options.commandTimeoutMs, 3_000, 1, 600_000),
      connectTimeoutMs: checkBound('connectTimeoutMs', options.connectTimeoutMs, 10_000, 1, 600_000),
      maxInFlight: checkBound('maxInFlight', options.maxInFlight, 1_024, 1, 1_000_000),
      maxConsumers: checkBound('maxConsumers', options.maxConsumers, 64, 1, 1_024),
      retryBaseMs,
      retryMaxMs: checkBound('retryMaxMs', options.retryMaxMs, 5_000, retryBaseMs, 600_000),
      maxBatchBytes: checkBound('maxBatchBytes', options.maxBatchBytes, 1024 * 1024, 1, 4 * 1024 * 1024),
      maxMessageBytes: checkBound('maxMessageBytes', options.maxMessageBytes, DEFAULT_MAX_MESSAGE_BYTES, 1, 4 * 1024 * 1024),
    };
    if (mode === 'lite' && this.liteTopic(this.partitions - 1).length > MAX_LITE_TOPIC) {
      throw new TransportError(
        TransportErrorCodes.INVALID,
        `prefix is too long for lite mode: lite topic ${this.liteTopic(this.partitions - 1)} exceeds ${MAX_LITE_TOPIC} characters`,
      );
    }
    this.hooks = hooksOf(options);
  }

  private liteTopic(partition: number): string {
    return `${this.o.prefix}-p-${partition}`;
  }

  private partitionTopic(partition: number): string {
    return `${this.o.topicPrefix}-p-${partition}`;
  }

  /** One gRPC channel (one HTTP/2 connection) for every session of the transport. */
  private channel(): MessagingClient {
    this.client ??= new MessagingService(this.o.endpoints, grpc.credentials.createInsecure(), {
      // A proxy that went away is noticed within seconds, and reconnected to quickly after.
      'grpc.keepalive_time_ms': 10_000,
      'grpc.keepalive_timeout_ms': 5_000,
      'grpc.initial_reconnect_backoff_ms': 200,
      'grpc.max_reconnect_backoff_ms': 2_000,
      'grpc.max_receive_message_length': 16 * 1024 * 1024,
    });
    return this.client;
  }

  /** Registers the producer once; a failed start is retried by the next call. */
  private started(): Promise<RocketMqSession> {
    this.producer ??= (async () => {
      const topics = this.o.mode === 'lite' ? [this.o.topicPrefix] : [];
      const session = new RocketMqSession(this.channel(), {
        endpoints: this.o.endpoints,
        clientType: 'PRODUCER',
        topics: [...topics, this.o.decisionsTopic],
        requestTimeoutMs: this.o.commandTimeoutMs,
        connectTimeoutMs: this.o.connectTimeoutMs,
      });
      try {
        await session.ready();
      } catch (err) {
        await session.close();
        throw err;
      }
      return session;
    })().catch((err: unknown) => {
      this.producer = undefined;
      throw err;
    });
    return this.producer;
  }

  /**
   * Sends one message. A lite message is always sent alone: the 5.5 broker does not dispatch the
   * messages of a batch send to their lite topics (they are stored, and never delivered).
   */
  private async send(topic: string, body: Uint8Array, liteTopic: string | undefined, what: string): Promise<void> {
    if (this.inFlight >= this.o.maxInFlight) {
      throw new TransportError(TransportErrorCodes.UNAVAILABLE, `more than ${this.o.maxInFlight} publishes in flight`);
    }
    this.inFlight++;
    try {
      const producer = await this.started();
      const now = Date.now();
      const message = {
        topic: { name: topic },
        systemProperties: {
          messageId: messageId(),
          tag: this.o.prefix,
          messageType: liteTopic === undefined ? 'NORMAL' : 'LITE',
          bodyEncoding: 'IDENTITY',
          bornTimestamp: { seconds: Math.floor(now / 1_000), nanos: (now % 1_000) * 1_000_000 },
          bornHost: HOST,
          ...(liteTopic === undefined ? {} : { liteTopic }),
        },
        body: Buffer.from(body.buffer, body.byteOffset, body.byteLength),
      };
      const r = await producer.call<{ entries?: { status?: { code?: string; message?: string } }[] }>('SendMessage', {
        messages: [message],
      });
      const status = r.entries?.[0]?.status;
      if (status && status.code !== 'OK') throw new Error(`${status.code}${status.message ? ` (${status.message})` : ''}`);
    } catch (err) {
      throw this.closed ? closedError(this.name) : unavailable(what, err);
    } finally {
      this.inFlight--;
    }
  }

  async publish(partition: number, batch: Uint8Array): Promise<void> {
    if (this.closed) throw closedError(this.name);
    checkPartition(partition, this.partitions);
    checkPayload('batch', batch, this.o.maxBatchBytes);
    if (this.o.mode === 'lite') await this.send(this.o.topicPrefix, batch, this.liteTopic(partition), 'publish');
    else await this.send(this.partitionTopic(partition), batch, undefined, 'publish');
  }

  async broadcast(message: Uint8Array): Promise<void> {
    if (this.closed) throw closedError(this.name);
    checkPayload('decision message', message, this.o.maxMessageBytes);
    await this.send(this.o.decisionsTopic, message, undefined, 'broadcast');
  }

  async consume(partition: number, group: string, handler: BatchHandler): Promise<Subscription> {
    if (this.closed) throw closedError(this.name);
    checkPartition(partition, this.partitions);
    checkName('group', group);
    const onMessage = (m: { body: Uint8Array }, behind: number): Promise<void> =>
      runHandler(
        handler,
        new Uint8Array(m.body.buffer, m.body.byteOffset, m.body.byteLength),
        { partition, lag: behind },
        this.hooks.onHandlerError,
      );
    if (this.o.mode === 'topics') {
      return this.plainSubscription(this.partitionTopic(partition), `${this.o.prefix}_${group}`, partition, onMessage);
    }
    this.reserve();
    try {
      const consumer = await this.liteConsumer(group);
      const sub = await consumer.add(this.liteTopic(partition), partition, onMessage);
      return this.counted(sub);
    } catch (err) {
      this.subscriptions--;
      throw this.closed ? closedError(this.name) : unavailable('consume', err);
    }
  }

  async subscribeDecisions(handler: (message: Uint8Array) => void): Promise<Subscription> {
    if (this.closed) throw closedError(this.name);
    // A group of its own gets every message. A new group may start at the topic's beginning and
    // a group taken up again where it stopped, so messages born before the subscription are skipped.
    const since = Date.now();
    const n = this.decisionSubscriptions++;
    const group = this.o.subscriberId
      ? `${this.o.prefix}_d_${this.o.subscriberId}_${n}`
      : `${this.o.prefix}_d_${since.toString(36)}${randomBytes(3).toString('hex')}`;
    return this.plainSubscription(this.o.decisionsTopic, group, -1, async (m) => {
      const born = m.systemProperties.bornTimestamp;
      if (born && born.seconds * 1_000 + Math.floor(born.nanos / 1_000_000) < since) return;
      deliverDecision(handler, new Uint8Array(m.body), this.hooks.onDecisionError);
    });
  }

  private reserve(): void {
    if (this.subscriptions >= this.o.maxConsumers) {
      throw new TransportError(TransportErrorCodes.INVALID, `more than ${this.o.maxConsumers} consumers on one transport`);
    }
    this.subscriptions++;
  }

  /** A subscription that gives its slot back when stopped. */
  private counted(sub: Subscription, after?: () => Promise<void>): Subscription {
    let stopping: Promise<void> | undefined;
    return {
      stop: () =>
        (stopping ??= (async () => {
          await sub.stop();
          await after?.();
          this.subscriptions--;
        })()),
    };
  }

  private settings(topic: string, group: string, lite: boolean): ConsumerSettings {
    // Normal topics are shared by every stream on the broker; a lite topic is the stream's own.
    return { ...this.o, topic, group, lite, tag: lite ? '*' : this.o.prefix, hooks: this.hooks };
  }

  /** The group's lite consumer, started once; a failed start is retried by the next call. */
  private liteConsumer(group: string): Promise<GroupConsumer> {
    let consumer = this.lite.get(group);
    if (!consumer) {
      const c = new GroupConsumer(this.channel(), this.settings(this.o.topicPrefix, group, true));
      consumer = c.start().then(
        () => c,
        async (err: unknown) => {
          this.lite.delete(group);
          await c.close();
          throw err;
        },
      );
      this.lite.set(group, consumer);
    }
    return consumer;
  }

  private async plainSubscription(
    topic: string,
    group: string,
    partition: number,
    onMessage: Parameters<GroupConsumer['add']>[2],
  ): Promise<Subscription> {
    this.reserve();
    const consumer = new GroupConsumer(this.channel(), this.settings(topic, group, false));
    try {
      await consumer.start();
      this.plain.add(consumer);
      if (this.closed) throw closedError(this.name);
      const sub = await consumer.add('', partition, onMessage);
      return this.counted(sub, async () => {
        this.plain.delete(consumer);
        await consumer.close();
      });
    } catch (err) {
      this.subscriptions--;
      this.plain.delete(consumer);
      await consumer.close();
      throw this.closed ? closedError(this.name) : unavailable('consume', err);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const lite = await Promise.allSettled([...this.lite.values()]);
    await Promise.all([
      ...lite.flatMap((r) => (r.status === 'fulfilled' ? [r.value.close()] : [])),
      ...[...this.plain].map((c) => c.close()),
    ]);
    this.lite.clear();
    this.plain.clear();
    const producer = this.producer;
    this.producer = undefined;
    if (producer) await (await producer.catch(() => undefined))?.close();
    this.client?.close();
    this.client = undefined;
  }
}
