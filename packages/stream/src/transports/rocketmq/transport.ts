/**
 * Event stream on Apache RocketMQ 5 through its gRPC proxy: one normal topic per partition
 * (`<topicPrefix>-p-<n>`, one queue each, created by the operator), the logical stream name
 * (`prefix`) as the message tag, consumer groups named `<prefix>_<group>`, decisions on one
 * normal topic read by a fresh consumer group per subscriber (every group gets every message:
 * fan-out). See docs/transports.md for why partitions are not LiteTopics.
 */
import { format } from 'node:util';
import type { MessageView, Producer, SimpleConsumer } from 'rocketmq-client-nodejs';
import { TransportError, TransportErrorCodes } from '../../errors.js';
import type { BatchHandler, EventTransport, Subscription } from '../../transport.js';
import {
  DEFAULT_MAX_MESSAGE_BYTES,
  backoffMs,
  checkBound,
  checkName,
  checkPartition,
  checkPartitionCount,
  checkPayload,
  closedError,
  deliverDecision,
  hooksOf,
  runHandler,
  sleep,
  unavailable,
  withTimeout,
  type TransportHooks,
} from '../common.js';
import { rocketmq } from './client.js';

/** Options for {@link RocketMqTransport}. */
export interface RocketMqTransportOptions extends TransportHooks {
  /** Number of partitions, 1..1024; topics `<topicPrefix>-p-0..partitions-1` must exist. */
  partitions: number;
  /** Proxy gRPC endpoints, e.g. `127.0.0.1:8081`. */
  endpoints: string;
  /** Partition topics are `<topicPrefix>-p-<n>`. @default 'sluice-events' */
  topicPrefix?: string;
  /** Topic for decisions. @default 'sluice-decisions' */
  decisionsTopic?: string;
  /** Logical stream name: message tag and consumer group prefix. @default 'sluice' */
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
  /** Publishes waiting for the proxy at once; more reject. @default 1024 */
  maxInFlight?: number;
  /** Consumers at once (each is one client session). @default 64 */
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

/** How soon a stopping consumer makes the messages it received but did not handle visible again, in ms. */
const HAND_BACK_MS = 1_000;

/** The client logs through this: errors go to the consume hook, the rest is dropped. */
function clientLogger(hooks: TransportHooks) {
  const drop = (): void => {};
  return {
    info: drop,
    debug: drop,
    warn: drop,
    error: (...args: unknown[]) => hooks.onConsumeError?.(new Error(format(...args)), -1),
  };
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
  private producer: Promise<Producer> | undefined;
  private readonly subs = new Set<RocketMqLoop>();
  private inFlight = 0;
  private closed = false;

  constructor(options: RocketMqTransportOptions) {
    this.partitions = checkPartitionCount(options.partitions);
    if (typeof options.endpoints !== 'string' || options.endpoints === '') {
      throw new TransportError(TransportErrorCodes.INVALID, 'endpoints is required, e.g. 127.0.0.1:8081');
    }
    const retryBaseMs = checkBound('retryBaseMs', options.retryBaseMs, 100, 1, 60_000);
    this.o = {
      partitions: this.partitions,
      endpoints: options.endpoints,
      topicPrefix: checkName('topicPrefix', options.topicPrefix ?? 'sluice-events'),
      decisionsTopic: checkName('decisionsTopic', options.decisionsTopic ?? 'sluice-decisions'),
      prefix: checkName('prefix', options.prefix ?? 'sluice'),
      readCount: checkBound('readCount', options.readCount, 32, 1, 32),
      awaitMs: checkBound('awaitMs', options.awaitMs, 5_000, 100, 30_000),
      invisibleMs: checkBound('invisibleMs', options.invisibleMs, 15_000, 10_000, 12 * 3_600_000),
      commandTimeoutMs: checkBound('commandTimeoutMs', options.commandTimeoutMs, 3_000, 1, 600_000),
      maxInFlight: checkBound('maxInFlight', options.maxInFlight, 1_024, 1, 1_000_000),
      maxConsumers: checkBound('maxConsumers', options.maxConsumers, 64, 1, 1_024),
      retryBaseMs,
      retryMaxMs: checkBound('retryMaxMs', options.retryMaxMs, 5_000, retryBaseMs, 600_000),
      maxBatchBytes: checkBound('maxBatchBytes', options.maxBatchBytes, 1024 * 1024, 1, 4 * 1024 * 1024),
      maxMessageBytes: checkBound('maxMessageBytes', options.maxMessageBytes, DEFAULT_MAX_MESSAGE_BYTES, 1, 4 * 1024 * 1024),
    };
    this.hooks = hooksOf(options);
  }

  private topic(partition: number): string {
    return `${this.o.topicPrefix}-p-${partition}`;
  }

  private clientOptions() {
    return {
      endpoints: this.o.endpoints,
      namespace: '',
      requestTimeout: this.o.commandTimeoutMs,
      logger: clientLogger(this.hooks),
    };
  }

  /** Starts the producer once; a failed start is retried by the next call. */
  private started(): Promise<Producer> {
    this.producer ??= (async () => {
      // No topics up front: routes are fetched on first send. With several topics, client
      // 1.0.8 can receive the proxy's settings before it starts waiting for them, and its
      // startup then never completes.
      const producer = new rocketmq.Producer({ ...this.clientOptions(), topics: [], maxAttempts: 1 });
      try {
        await producer.startup();
      } catch (err) {
        await producer.shutdown().catch(() => undefined);
        throw err;
      }
      return producer;
    })().catch((err: unknown) => {
      this.producer = undefined;
      throw err;
    });
    return withTimeout(this.producer, this.o.commandTimeoutMs * 2, 'connect');
  }

  private async send(topic: string, body: Uint8Array, what: string): Promise<void> {
    if (this.inFlight >= this.o.maxInFlight) {
      throw new TransportError(TransportErrorCodes.UNAVAILABLE, `more than ${this.o.maxInFlight} publishes in flight`);
    }
    this.inFlight++;
    try {
      const producer = await this.started();
      const buffer = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
      await withTimeout(producer.send({ topic, tag: this.o.prefix, body: buffer }), this.o.commandTimeoutMs, what);
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
    await this.send(this.topic(partition), batch, 'publish');
  }

  async broadcast(message: Uint8Array): Promise<void> {
    if (this.closed) throw closedError(this.name);
    checkPayload('decision message', message, this.o.maxMessageBytes);
    await this.send(this.o.decisionsTopic, message, 'broadcast');
  }

  async consume(partition: number, group: string, handler: BatchHandler): Promise<Subscription> {
    if (this.closed) throw closedError(this.name);
    checkPartition(partition, this.partitions);
    checkName('group', group);
    return this.startLoop(this.topic(partition), `${this.o.prefix}_${group}`, async (m) => {
      await runHandler(
        handler,
        new Uint8Array(m.body.buffer, m.body.byteOffset, m.body.byteLength),
        { partition },
        this.hooks.onHandlerError,
      );
    });
  }

  async subscribeDecisions(handler: (message: Uint8Array) => void): Promise<Subscription> {
    if (this.closed) throw closedError(this.name);
    // A group of its own gets every message; a new group may start at the topic's beginning,
    // so messages born before the subscription are skipped.
    const since = Date.now();
    const group = `${this.o.prefix}_d_${since.toString(36)}${Math.random().toString(36).slice(2, 8)}`;
    return this.startLoop(this.o.decisionsTopic, group, async (m) => {
      if (m.bornTimestamp && m.bornTimestamp.getTime() < since) return;
      deliverDecision(handler, new Uint8Array(m.body), this.hooks.onDecisionError);
    });
  }

  private async startLoop(topic: string, group: string, onMessage: (m: MessageView) => Promise<void>): Promise<Subscription> {
    if (this.subs.size >= this.o.maxConsumers) {
      throw new TransportError(TransportErrorCodes.INVALID, `more than ${this.o.maxConsumers} consumers on one transport`);
    }
    const consumer = new rocketmq.SimpleConsumer({
      ...this.clientOptions(),
      consumerGroup: group,
      subscriptions: new Map([[topic, new rocketmq.FilterExpression(this.o.prefix)]]),
      awaitDuration: this.o.awaitMs,
    });
    try {
      await withTimeout(consumer.startup(), this.o.commandTimeoutMs * 2, 'consume');
    } catch (err) {
      await consumer.shutdown().catch(() => undefined);
      throw this.closed ? closedError(this.name) : unavailable('consume', err);
    }
    const loop = new RocketMqLoop(consumer, onMessage, this.o, this.hooks, () => this.subs.delete(loop));
    this.subs.add(loop);
    if (this.closed) {
      await loop.stop();
      throw closedError(this.name);
    }
    return loop;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.subs].map((s) => s.stop()));
    const producer = this.producer;
    this.producer = undefined;
    if (producer) {
      try {
        await (await producer).shutdown();
      } catch {
        // Never started: nothing to shut down.
      }
    }
  }
}

/** Receives, handles one message at a time in order, acknowledges; retries with backoff. */
class RocketMqLoop implements Subscription {
  private readonly abort = new AbortController();
  private readonly running: Promise<void>;
  private stopping: Promise<void> | undefined;

  constructor(
    private readonly consumer: SimpleConsumer,
    private readonly onMessage: (m: MessageView) => Promise<void>,
    private readonly o: Compiled,
    private readonly hooks: TransportHooks,
    private readonly onStopped: () => void,
  ) {
    this.running = this.loop();
  }

  async stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.abort.abort();
      // A receive ends by itself within `awaitMs`; what it brought is handled or left to
      // become visible again after `invisibleMs`.
      await this.running;
      await withTimeout(this.consumer.shutdown(), this.o.commandTimeoutMs, 'shutdown').catch(() => undefined);
      this.onStopped();
    })();
    return this.stopping;
  }

  /** Makes a received message visible again soon; best effort (it becomes so by itself later). */
  private async handBack(m: MessageView): Promise<void> {
    try {
      await withTimeout(this.consumer.changeInvisibleDuration(m, HAND_BACK_MS), this.o.commandTimeoutMs, 'hand back');
    } catch {
      // It becomes visible after `invisibleMs` anyway.
    }
  }

  private async loop(): Promise<void> {
    const signal = this.abort.signal;
    let attempt = 0;
    while (!signal.aborted) {
      try {
        const messages = await withTimeout(
          this.consumer.receive(this.o.readCount, this.o.invisibleMs),
          this.o.awaitMs + this.o.commandTimeoutMs,
          'receive',
        );
        attempt = 0;
        // Each ack leaves as soon as its handler resolved; the next handler does not wait for
        // the round trip, the next receive does.
        const acks: Promise<void>[] = [];
        let handled = 0;
        for (const m of messages) {
          if (signal.aborted) break;
          await this.onMessage(m);
          handled++;
          acks.push(withTimeout(this.consumer.ack(m), this.o.commandTimeoutMs, 'ack'));
        }
        // Stopping (the partition is changing owner): what this receive brought and nobody
        // handled is handed back at once, instead of staying invisible for `invisibleMs`.
        const returned = messages.slice(handled).map((m) => this.handBack(m));
        const failed = (await Promise.allSettled(acks)).find((r) => r.status === 'rejected');
        await Promise.all(returned);
        if (failed) throw failed.reason;
      } catch (err) {
        if (signal.aborted) break;
        this.hooks.onConsumeError?.(err, -1);
        await sleep(backoffMs(attempt++, this.o.retryBaseMs, this.o.retryMaxMs), signal);
      }
    }
  }
}
