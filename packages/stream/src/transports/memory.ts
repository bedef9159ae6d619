/**
 * The embedded default: gateways and aggregators in one process, no server. Each partition is
 * a bounded log of batches; each consumer group keeps its own position in it, so a consumer
 * started after another one stopped continues after the last acknowledged batch, as with the
 * server-backed transports.
 */
import { TransportError, TransportErrorCodes } from '../errors.js';
import type { BatchHandler, EventTransport, Subscription } from '../transport.js';
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
  runHandler,
  type TransportHooks,
} from './common.js';

/** Options for {@link MemoryTransport}. */
export interface MemoryTransportOptions extends TransportHooks {
  /** Number of partitions, 1..1024. */
  partitions: number;
  /**
   * Batches a partition holds that some known group has not acknowledged yet; `publish`
   * rejects with `SLUICE_ERR_STREAM_UNAVAILABLE` beyond it.
   * @default 10000
   */
  queueCapacity?: number;
  /** Largest accepted batch in bytes. @default 1048576 */
  maxBatchBytes?: number;
  /** Largest accepted decision message in bytes. @default 65536 */
  maxMessageBytes?: number;
  /** Largest number of consumer groups per partition. @default 64 */
  maxGroups?: number;
}

interface Group {
  /** Offset of the next batch to hand out. */
  next: number;
  /** Offset after the last acknowledged batch. */
  acked: number;
}

/** One partition's log: `entries[0]` has offset `base`. */
class PartitionLog {
  entries: Uint8Array[] = [];
  base = 0;
  readonly groups = new Map<string, Group>();
  private waiters: (() => void)[] = [];

  get end(): number {
    return this.base + this.entries.length;
  }

  group(name: string, maxGroups: number): Group {
    let g = this.groups.get(name);
    if (!g) {
      if (this.groups.size >= maxGroups) {
        throw new TransportError(TransportErrorCodes.INVALID, `more than ${maxGroups} consumer groups on one partition`);
      }
      // A new group starts at the oldest retained batch, like the server transports.
      g = { next: this.base, acked: this.base };
      this.groups.set(name, g);
    }
    return g;
  }

  append(batch: Uint8Array): void {
    this.entries.push(batch);
    this.wake();
  }

  /** Drops batches every group has acknowledged. Without groups, batches wait for the first. */
  trim(): void {
    if (this.groups.size === 0) return;
    let min = Infinity;
    for (const g of this.groups.values()) min = Math.min(min, g.acked);
    const drop = min - this.base;
    if (drop > 0) {
      this.entries.splice(0, drop);
      this.base = min;
    }
  }

  at(offset: number): Uint8Array | undefined {
    return this.entries[offset - this.base];
  }

  waitForData(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        signal.removeEventListener('abort', done);
        resolve();
      };
      this.waiters.push(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }
}

/**
 * In-process {@link EventTransport}: bounded per-partition logs with per-group positions and an
 * in-process decision fan-out. Delivery is asynchronous, as with a server, so callers cannot
 * come to rely on re-entrant handlers.
 *
 * @example
 * const transport = new MemoryTransport({ partitions: 8 });
 * const sub = await transport.consume(3, 'aggregators', async (batch, info) => { ... });
 * await transport.publish(3, encodeEvents(events));
 */
export class MemoryTransport implements EventTransport {
  readonly name = 'memory';
  /** Every reader and writer is in this process. */
  readonly inProcess = true;
  readonly partitions: number;
  private readonly capacity: number;
  private readonly maxBatchBytes: number;
  private readonly maxMessageBytes: number;
  private readonly maxGroups: number;
  private readonly hooks: TransportHooks;
  private readonly logs: PartitionLog[];
  private readonly decisionHandlers = new Set<(message: Uint8Array) => void>();
  private readonly subscriptions = new Set<Subscription>();
  private closed = false;

  constructor(options: MemoryTransportOptions) {
    this.partitions = checkPartitionCount(options.partitions);
    this.capacity = checkBound('queueCapacity', options.queueCapacity, 10_000, 1, 10_000_000);
    this.maxBatchBytes = checkBound('maxBatchBytes', options.maxBatchBytes, DEFAULT_MAX_BATCH_BYTES, 1, 64 * 1024 * 1024);
    this.maxMessageBytes = checkBound('maxMessageBytes', options.maxMessageBytes, DEFAULT_MAX_MESSAGE_BYTES, 1, 16 * 1024 * 1024);
    this.maxGroups = checkBound('maxGroups', options.maxGroups, 64, 1, 1024);
    this.hooks = hooksOf(options);
    this.logs = Array.from({ length: this.partitions }, () => new PartitionLog());
  }

  async publish(partition: number, batch: Uint8Array): Promise<void> {
    if (this.closed) throw closedError(this.name);
    const log = this.logs[checkPartition(partition, this.partitions)]!;
    checkPayload('batch', batch, this.maxBatchBytes);
    if (log.entries.length >= this.capacity) {
      throw new TransportError(
        TransportErrorCodes.UNAVAILABLE,
        `partition ${partition} holds ${this.capacity} unacknowledged batches (queueCapacity)`,
      );
    }
    // Copied: the caller may reuse its buffer as soon as publish resolves.
    log.append(batch.slice());
  }

  async consume(partition: number, group: string, handler: BatchHandler): Promise<Subscription> {
    if (this.closed) throw closedError(this.name);
    const log = this.logs[checkPartition(partition, this.partitions)]!;
    const state = log.group(checkName('group', group), this.maxGroups);
    const abort = new AbortController();
    const loop = async (): Promise<void> => {
      while (!abort.signal.aborted) {
        const offset = state.next;
        const batch = log.at(offset);
        if (batch === undefined) {
          await log.waitForData(abort.signal);
          continue;
        }
        state.next = offset + 1;
        await runHandler(handler, batch, { partition, lag: log.end - state.next }, this.hooks.onHandlerError);
        state.acked = Math.max(state.acked, offset + 1);
        log.trim();
        // Yield between batches so one busy partition cannot starve the event loop.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    };
    const running = loop();
    const sub: Subscription = {
      stop: async () => {
        abort.abort();
        this.subscriptions.delete(sub);
        await running;
      },
    };
    this.subscriptions.add(sub);
    return sub;
  }

  async broadcast(message: Uint8Array): Promise<void> {
    if (this.closed) throw closedError(this.name);
    checkPayload('decision message', message, this.maxMessageBytes);
    const handlers = [...this.decisionHandlers];
    for (const handler of handlers) {
      // Each subscriber gets its own copy, delivered asynchronously as over a network.
      const copy = message.slice();
      setImmediate(() => {
        if (this.decisionHandlers.has(handler)) deliverDecision(handler, copy, this.hooks.onDecisionError);
      });
    }
  }

  async subscribeDecisions(handler: (message: Uint8Array) => void): Promise<Subscription> {
    if (this.closed) throw closedError(this.name);
    // A wrapper gives every subscription its own identity, even for the same function.
    const own = (message: Uint8Array): void => handler(message);
    this.decisionHandlers.add(own);
    const sub: Subscription = {
      stop: async () => {
        this.decisionHandlers.delete(own);
        this.subscriptions.delete(sub);
      },
    };
    this.subscriptions.add(sub);
    return sub;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.subscriptions].map((s) => s.stop()));
    this.decisionHandlers.clear();
    for (const log of this.logs) log.wake();
  }
}
