/**
 * One consumer group's reading loop on one topic, over one {@link RocketMqSession}.
 *
 * - A lite consumer reads a LITE parent topic for any number of lite topics (partitions): each
 *   is subscribed with SyncLiteSubscription and has a reader of its own. The broker returns the
 *   messages of every subscribed lite topic from one receive call.
 * - A plain consumer reads a normal topic for one reader (a partition topic, or decisions).
 *
 * A reader handles its messages one at a time in order, then acknowledges them; messages a
 * stopped reader did not handle are handed back (visible again within a second) so the next
 * owner gets them soon, in order.
 */
import { randomUUID } from 'node:crypto';
import { TransportError, TransportErrorCodes } from '../../errors.js';
import type { Subscription } from '../../transport.js';
import { backoffMs, sleep, type TransportHooks } from '../common.js';
import { duration, type Message, type MessageQueue, type MessagingClient } from './client.js';
import { RocketMqSession } from './session.js';

/** How soon a stopping reader makes the messages it received but did not handle visible again, in ms. */
const HAND_BACK_MS = 1_000;
/** How often a lite consumer sends its whole subscription set, in case the broker lost it, in ms. */
const RESYNC_MS = 30_000;

export interface ConsumerSettings {
  readonly endpoints: string;
  /** The topic read: the LITE parent (lite) or a normal topic. */
  readonly topic: string;
  readonly group: string;
  readonly lite: boolean;
  /** Only messages with this tag (`*`: all). */
  readonly tag: string;
  readonly readCount: number;
  readonly awaitMs: number;
  readonly invisibleMs: number;
  readonly commandTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly retryBaseMs: number;
  readonly retryMaxMs: number;
  readonly hooks: TransportHooks;
}

/** Handles one message; `behind` counts the received messages of the same reader waiting after it. */
export type MessageHandler = (message: Message, behind: number) => Promise<void>;

class Reader implements Subscription {
  stopped = false;
  /** The current receive's handling for this reader: stop() waits for it. */
  busy: Promise<void> = Promise.resolve();
  private stopping: Promise<void> | undefined;

  constructor(
    readonly key: string,
    readonly partition: number,
    readonly handle: MessageHandler,
    private readonly onStop: (reader: Reader) => Promise<void>,
  ) {}

  stop(): Promise<void> {
    this.stopping ??= this.onStop(this);
    return this.stopping;
  }
}

export class GroupConsumer {
  private readonly session: RocketMqSession;
  private readonly readers = new Map<string, Reader>();
  /**
   * The lite topics this client holds, as the full re-sync sends them: a reader's, until it stops
   * or the broker says another client of the group took the lite topic over. A re-sync must not
   * take a lite topic back from its new owner.
   */
  private readonly held = new Set<string>();
  private readonly abort = new AbortController();
  private queue: MessageQueue | undefined;
  private running: Promise<void> | undefined;
  /** Subscription changes go out one at a time, in order. */
  private syncs: Promise<unknown> = Promise.resolve();
  private syncedGeneration = 0;
  private lastResync = 0;
  private closing: Promise<void> | undefined;
  private readonly pending = new Set<Promise<void>>();

  constructor(
    client: MessagingClient,
    private readonly s: ConsumerSettings,
  ) {
    this.session = new RocketMqSession(client, {
      endpoints: s.endpoints,
      clientType: s.lite ? 'LITE_PUSH_CONSUMER' : 'SIMPLE_CONSUMER',
      group: s.group,
      topics: [s.topic],
      tag: s.tag,
      requestTimeoutMs: s.commandTimeoutMs,
      connectTimeoutMs: s.connectTimeoutMs,
      awaitMs: s.awaitMs,
      // Another client of the group subscribed the lite topic (a new owner): this one's reader,
      // if it still has one, receives nothing more from the broker until it subscribes again.
      onUnsubscribeLite: (liteTopic) => this.held.delete(liteTopic),
    });
  }

  /** Registers with the proxy and finds the topic's queue; the reading loop starts with it. */
  async start(): Promise<void> {
    await this.session.ready();
    this.syncedGeneration = this.session.generation;
    const queues = await this.session.route(this.s.topic);
    this.queue = queues.find((q) => q.permission === 'READ' || q.permission === 'READ_WRITE');
    if (!this.queue) {
      throw new TransportError(TransportErrorCodes.UNAVAILABLE, `topic ${this.s.topic} has no readable queue`);
    }
    this.running = this.loop();
  }

  /** Adds a reader for `key` (a lite topic; '' on a plain consumer) and, on a lite consumer, subscribes it. */
  async add(key: string, partition: number, handle: MessageHandler): Promise<Subscription> {
    if (this.readers.has(key)) {
      throw new TransportError(
        TransportErrorCodes.INVALID,
        `${key || this.s.topic} is already consumed by group ${this.s.group} here`,
      );
    }
    const reader = new Reader(key, partition, handle, (r) => this.remove(r));
    this.readers.set(key, reader);
    if (this.s.lite) {
      // Held before the call: a full re-sync queued behind it must not drop it.
      this.held.add(key);
      try {
        await this.sync('PARTIAL_ADD', () => [key]);
      } catch (err) {
        this.held.delete(key);
        this.readers.delete(key);
        throw err;
      }
    }
    return reader;
  }

  private async remove(reader: Reader): Promise<void> {
    reader.stopped = true;
    await reader.busy;
    if (this.readers.get(reader.key) === reader) this.readers.delete(reader.key);
    this.held.delete(reader.key);
    if (this.s.lite && !this.abort.signal.aborted) {
      // Best effort: the next owner's subscription takes the lite topic over anyway (the group
      // is exclusive), and a closed client's subscriptions are dropped with it.
      await this.sync('PARTIAL_REMOVE', () => [reader.key]).catch(() => undefined);
    }
  }

  /** Queues a subscription change; `liteTopics` is read when it is its turn to go out. */
  private sync(action: 'PARTIAL_ADD' | 'PARTIAL_REMOVE' | 'COMPLETE_ADD', liteTopics: () => string[]): Promise<unknown> {
    const next = this.syncs.then(() =>
      this.session.call('SyncLiteSubscription', {
        action,
        topic: { name: this.s.topic },
        group: { name: this.s.group },
        liteTopicSet: liteTopics(),
      }),
    );
    this.syncs = next.catch(() => undefined);
    return next;
  }

  /** After a new telemetry stream (the proxy dropped the old one and its subscriptions), or every 30 s. */
  private async resyncIfNeeded(): Promise<void> {
    if (!this.s.lite) return;
    const now = Date.now();
    if (this.session.generation === this.syncedGeneration && now - this.lastResync < RESYNC_MS) return;
    const generation = this.session.generation;
    await this.sync('COMPLETE_ADD', () => [...this.held]);
    this.syncedGeneration = generation;
    this.lastResync = now;
  }

  private async loop(): Promise<void> {
    const signal = this.abort.signal;
    let attempt = 0;
    // Lite groups are orderly: while a lite topic's messages are out with one attempt, a receive
    // of another attempt gets none of that lite topic until they are acknowledged or their
    // invisibility ends (`invisibleMs`). So a receive that failed (its answer lost to a deadline
    // or a broken connection) is sent again as the same attempt, which gets those messages back;
    // a new attempt starts only once a receive has brought its answer.
    let attemptId = this.s.lite ? randomUUID() : undefined;
    this.lastResync = Date.now();
    while (!signal.aborted) {
      try {
        await this.session.ready();
        await this.resyncIfNeeded();
        const messages = await this.session.receive(this.queue!, this.s.readCount, this.s.invisibleMs, attemptId);
        attempt = 0;
        if (attemptId !== undefined) attemptId = randomUUID();
        await this.dispatch(messages);
      } catch (err) {
        if (signal.aborted) break;
        this.s.hooks.onConsumeError?.(err, this.readers.size === 1 ? [...this.readers.values()][0]!.partition : -1);
        await sleep(backoffMs(attempt++, this.s.retryBaseMs, this.s.retryMaxMs), signal);
      }
    }
  }

  /**
   * Hands each reader its messages; readers run side by side, each in order. Resolves once every
   * message was handled: the acknowledgements are still on their way while the next receive
   * goes out (a reader's next messages wait for them, and so does its stop()).
   */
  private async dispatch(messages: Message[]): Promise<void> {
    if (messages.length === 0) return;
    const byKey = new Map<string, Message[]>();
    for (const m of messages) {
      const key = this.s.lite ? (m.systemProperties.liteTopic ?? '') : '';
      let list = byKey.get(key);
      if (!list) byKey.set(key, (list = []));
      list.push(m);
    }
    const handled: Promise<void>[] = [];
    for (const [key, list] of byKey) {
      const reader = this.readers.get(key);
      if (!reader || reader.stopped) {
        this.track(this.handBack(key, list));
        continue;
      }
      let markHandled!: () => void;
      handled.push(new Promise<void>((resolve) => (markHandled = resolve)));
      reader.busy = reader.busy.then(() => this.run(reader, list, markHandled));
    }
    await Promise.all(handled);
  }

  /** Keeps a background call until it settles, so close() can wait for it. */
  private track(work: Promise<void>): void {
    this.pending.add(work);
    void work.finally(() => this.pending.delete(work));
  }

  private async run(reader: Reader, list: Message[], markHandled: () => void): Promise<void> {
    let handled = 0;
    try {
      for (const m of list) {
        if (reader.stopped) break;
        await reader.handle(m, list.length - handled - 1);
        handled++;
      }
    } finally {
      markHandled();
    }
    const results = await Promise.allSettled([
      this.ack(reader.key, list.slice(0, handled)),
      this.handBack(reader.key, list.slice(handled)),
    ]);
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) this.s.hooks.onConsumeError?.(failed.reason, reader.partition);
  }

  private async ack(key: string, list: Message[]): Promise<void> {
    if (list.length === 0) return;
    await this.session.call('AckMessage', {
      group: { name: this.s.group },
      topic: { name: this.s.topic },
      entries: list.map((m) => ({
        messageId: m.systemProperties.messageId,
        receiptHandle: m.systemProperties.receiptHandle,
        ...(key ? { liteTopic: key } : {}),
      })),
    });
  }

  /** Makes messages visible again soon; best effort (they become so by themselves after `invisibleMs`). */
  private async handBack(key: string, list: Message[]): Promise<void> {
    await Promise.all(
      list.map((m) =>
        this.session
          .call('ChangeInvisibleDuration', {
            group: { name: this.s.group },
            topic: { name: this.s.topic },
            receiptHandle: m.systemProperties.receiptHandle,
            invisibleDuration: duration(HAND_BACK_MS),
            messageId: m.systemProperties.messageId,
            ...(key ? { liteTopic: key } : {}),
          })
          .catch(() => undefined),
      ),
    );
  }

  /** Stops every reader and the loop, then says goodbye to the proxy. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const reader of this.readers.values()) reader.stopped = true;
      this.abort.abort();
      await this.running;
      await Promise.all([...this.readers.values()].map((r) => r.busy));
      await Promise.all([...this.pending]);
      this.readers.clear();
      await this.session.close();
    })();
    return this.closing;
  }
}
