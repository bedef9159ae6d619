/**
 * One partition consumer of the NATS transport: repeated bounded pull requests on a durable
 * consumer, handlers one at a time, an ack after each. On stop, batches fetched but not handled
 * are negatively acknowledged so the next owner gets them at once instead of after `ack_wait`.
 */
import type { Consumer, JsMsg, NatsConnection } from 'nats';
import type { BatchHandler, Subscription } from '../../transport.js';
import { backoffMs, runHandler, sleep, withTimeout, type TransportHooks } from '../common.js';

export interface NatsConsumerOptions {
  nc: NatsConnection;
  consumer: Consumer;
  partition: number;
  handler: BatchHandler;
  readCount: number;
  blockMs: number;
  retryBaseMs: number;
  retryMaxMs: number;
  flushTimeoutMs: number;
  hooks: TransportHooks;
  onStopped: () => void;
}

export class NatsPartitionConsumer implements Subscription {
  private readonly abort = new AbortController();
  private running: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;

  constructor(private readonly o: NatsConsumerOptions) {}

  start(): void {
    this.running = this.loop();
  }

  async stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.abort.abort();
      // A pull request ends by itself within `blockMs`; waiting for it keeps every message
      // it brings accounted for (handled or nak'ed).
      await this.running;
      this.o.onStopped();
    })();
    return this.stopping;
  }

  private async loop(): Promise<void> {
    const { o } = this;
    const signal = this.abort.signal;
    let attempt = 0;
    while (!signal.aborted) {
      try {
        const messages = await o.consumer.fetch({ max_messages: o.readCount, expires: o.blockMs });
        for await (const m of messages) {
          if (signal.aborted) {
            m.nak();
            continue;
          }
          await this.handle(m);
        }
        attempt = 0;
      } catch (err) {
        if (signal.aborted) break;
        o.hooks.onConsumeError?.(err, o.partition);
        await sleep(backoffMs(attempt++, o.retryBaseMs, o.retryMaxMs), signal);
      }
    }
    // Acks and naks are fire-and-forget publishes: make sure the server has them before the
    // partition's next owner starts reading.
    if (!o.nc.isClosed()) await withTimeout(o.nc.flush(), o.flushTimeoutMs, 'flush').catch(() => undefined);
  }

  private async handle(m: JsMsg): Promise<void> {
    await runHandler(this.o.handler, m.data, { partition: this.o.partition, lag: m.info.pending }, this.o.hooks.onHandlerError);
    m.ack();
  }
}
