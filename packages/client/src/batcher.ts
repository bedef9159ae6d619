import { ErrorCodes, SluiceError, type AdaptiveTimeout, type Decision } from '@sluice/core';
import { decodeDecision, decodeError, decodeResults, isErrorAnswer } from '@sluice/core/wire';
import { ClosedByCaller, type Transport } from './transport.js';

/** One check as the service takes it. */
export interface CheckItem {
  readonly resource: string;
  readonly key?: string;
  readonly cost?: number;
  readonly tenant?: string;
  /** A tier name: `core`, `normal` or a tier the resource declares (the service checks which). */
  readonly priority?: string;
}

/** One booking call as the service takes it (`/v1/book`, `/v1/claim`). */
export interface BookItem extends CheckItem {
  readonly id: string;
  /** The booking's token (see `BookOptions.token`). */
  readonly token?: string;
}

/** The batched decision endpoints, each with the per-limit statuses. */
export const DECISION_PATHS = Object.freeze({
  check: '/v1/check?statuses=1',
  book: '/v1/book?statuses=1',
  claim: '/v1/claim?statuses=1',
});

/** Which endpoint a batched call goes to. */
export type DecisionOp = keyof typeof DECISION_PATHS;

/** The pending queue is full: the service is not keeping up with this process. */
export class Overloaded extends SluiceError {
  constructor(max: number) {
    super(ErrorCodes.STORE_UNAVAILABLE, `more than ${max} checks are waiting for the service`);
  }
}

interface Pending {
  readonly item: CheckItem | BookItem;
  readonly resolve: (d: Decision) => void;
  readonly reject: (e: unknown) => void;
}

/** Options of {@link CheckBatcher}. */
export interface BatcherOptions {
  /** Most items in one request. */
  readonly maxBatch: number;
  /** Most checks queued or in flight; more are refused with {@link Overloaded}. */
  readonly maxPending: number;
  /** Timeout of one batch request (adaptive or fixed); told of every answer and timeout. */
  readonly timeout: AdaptiveTimeout;
}

/**
 * Coalesces the checks of one event-loop turn into `POST /v1/check` batches of at most
 * `maxBatch` items (bookings and claims into `/v1/book` and `/v1/claim` batches the same way);
 * each caller gets its own item's answer (a decision or an error). The pending bound is shared.
 */
export class CheckBatcher {
  #queues = new Map<DecisionOp, Pending[]>();
  #scheduled: NodeJS.Immediate | undefined;
  #pending = 0;
  readonly #inFlight = new Set<Promise<void>>();
  #closed = false;

  constructor(
    private readonly transport: Transport,
    private readonly options: BatcherOptions,
  ) {}

  /** Queues a check for the next flush. */
  check(item: CheckItem): Promise<Decision> {
    return this.#queue('check', item);
  }

  /** Queues a booking (`book`) or a claim (`claim`) for the next flush. */
  book(op: 'book' | 'claim', item: BookItem): Promise<Decision> {
    return this.#queue(op, item);
  }

  #queue(op: DecisionOp, item: CheckItem | BookItem): Promise<Decision> {
    if (this.#closed) return Promise.reject(new ClosedByCaller());
    if (this.#pending >= this.options.maxPending) return Promise.reject(new Overloaded(this.options.maxPending));
    this.#pending++;
    return new Promise<Decision>((resolve, reject) => {
      let queue = this.#queues.get(op);
      if (queue === undefined) this.#queues.set(op, (queue = []));
      queue.push({ item, resolve, reject });
      this.#scheduled ??= setImmediate(() => this.#flush());
    });
  }

  /** Refuses queued checks and waits for those in flight. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#scheduled !== undefined) clearImmediate(this.#scheduled);
    this.#scheduled = undefined;
    const queued = [...this.#queues.values()].flat();
    this.#queues = new Map();
    for (const p of queued) {
      this.#pending--;
      p.reject(new ClosedByCaller());
    }
    await Promise.allSettled([...this.#inFlight]);
  }

  #flush(): void {
    this.#scheduled = undefined;
    const queues = this.#queues;
    this.#queues = new Map();
    for (const [op, queue] of queues) {
      for (let i = 0; i < queue.length; i += this.options.maxBatch) {
        const batch = queue.slice(i, i + this.options.maxBatch);
        const sent = this.#send(DECISION_PATHS[op], batch).finally(() => {
          this.#pending -= batch.length;
          this.#inFlight.delete(sent);
        });
        this.#inFlight.add(sent);
      }
    }
  }

  async #send(path: string, batch: readonly Pending[]): Promise<void> {
    let results: unknown[];
    let budget: number | undefined;
    try {
      const sentAt = performance.now();
      budget = this.options.timeout.currentMs;
      const answer = await this.transport.call(path, {
        body: { items: batch.map((p) => p.item) },
        timeoutMs: budget,
      });
      this.options.timeout.observe(performance.now() - sentAt);
      if (answer.status !== 200) throw decodeError(answer.body, answer.status);
      results = decodeResults(answer.body, batch.length);
    } catch (err) {
      if (err instanceof SluiceError && err.code === ErrorCodes.STORE_TIMEOUT) this.options.timeout.timedOut(budget);
      for (const p of batch) p.reject(err);
      return;
    }
    batch.forEach((p, i) => {
      const r = results[i];
      try {
        if (isErrorAnswer(r)) throw decodeError(r, 400);
        p.resolve(decodeDecision(r));
      } catch (err) {
        p.reject(err);
      }
    });
  }
}
