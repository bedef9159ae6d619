import { ServerError, ServerErrorCodes } from './errors.js';

/** Bounds of a {@link TurnBatch}. */
export interface TurnBatchOptions {
  /** Most calls started in one turn of the event loop, over all clients. @default {@link CALLS_PER_TURN} */
  readonly perTurn?: number;
  /** Most calls one client may have waiting for their turn; more are refused `SLUICE_ERR_CLIENT_BUSY`. @default 10000 */
  readonly maxClientQueued?: number;
}

/**
 * Calls started per turn of the loop: enough that one client alone loses nothing to the extra
 * turns (a batch of 100 takes two), few enough that a turn stays short beside a flood of batches.
 */
export const CALLS_PER_TURN = 64;

/** One client's calls waiting for their turn, oldest first (a queue without `shift`'s copying). */
class ClientQueue {
  #items: (() => void)[] = [];
  #head = 0;

  get size(): number {
    return this.#items.length - this.#head;
  }

  push(start: () => void): void {
    this.#items.push(start);
  }

  take(): () => void {
    const start = this.#items[this.#head]!;
    this.#items[this.#head++] = noop;
    if (this.#head >= 1024 && this.#head * 2 >= this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return start;
  }
}

const noop = () => undefined;

/**
 * Runs the calls started during one turn of the event loop together, once the turn's I/O has
 * been read (`setImmediate`). Requests of different connections arrive in separate I/O
 * callbacks; a store that gathers the calls of one callback into one round trip (the Redis
 * store queues them until `process.nextTick`) would otherwise send one round trip per request.
 * Started together, they share one: under load, many requests per write instead of one.
 *
 * The loop is shared by client (the remote address): each turn starts at most `perTurn` calls,
 * one per client in turn (round robin, arrival order within a client), and leaves the rest for
 * the next turn, after the I/O that arrived meanwhile. A client sending batches of 100 then
 * delays another client's call by a few calls, not by its whole backlog, and its backlog is
 * bounded (`maxClientQueued`). The cost is at most one turn of the loop before a call starts.
 */
export class TurnBatch {
  /** Client -> its waiting calls; Map order is the turn order (next client first). */
  readonly #queues = new Map<string, ClientQueue>();
  readonly #perTurn: number;
  readonly #maxClientQueued: number;
  #scheduled = false;

  constructor(options: TurnBatchOptions = {}) {
    this.#perTurn = options.perTurn ?? CALLS_PER_TURN;
    this.#maxClientQueued = options.maxClientQueued ?? 10_000;
  }

  /** How many calls wait for their turn. */
  get size(): number {
    let n = 0;
    for (const q of this.#queues.values()) n += q.size;
    return n;
  }

  /**
   * Starts `call` of `client` in its turn; settles as it does. Rejects with
   * `SLUICE_ERR_CLIENT_BUSY` (the call never starts) when the client has `maxClientQueued`
   * calls waiting already.
   */
  defer<T>(client: string, call: () => Promise<T>): Promise<T> {
    let queue = this.#queues.get(client);
    if (queue !== undefined && queue.size >= this.#maxClientQueued) {
      return Promise.reject(
        new ServerError(
          ServerErrorCodes.CLIENT_BUSY,
          `this address has ${this.#maxClientQueued} calls waiting for their turn already; retry later`,
        ),
      );
    }
    return new Promise<T>((resolve, reject) => {
      if (queue === undefined) this.#queues.set(client, (queue = new ClientQueue()));
      queue.push(() => {
        try {
          call().then(resolve, reject);
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(this.#run);
      }
    });
  }

  readonly #run = (): void => {
    this.#scheduled = false;
    for (let budget = this.#perTurn; budget > 0; budget--) {
      const next = this.#queues.entries().next();
      if (next.done === true) return;
      const [client, queue] = next.value;
      const start = queue.take();
      // The client goes to the back of the turn order (or leaves it with nothing waiting).
      this.#queues.delete(client);
      if (queue.size > 0) this.#queues.set(client, queue);
      start();
    }
    if (this.#queues.size > 0 && !this.#scheduled) {
      this.#scheduled = true;
      setImmediate(this.#run);
    }
  };
}
