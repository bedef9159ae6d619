import { ServerError, ServerErrorCodes } from './errors.js';

/** Bounds of a {@link TurnBatch}. */
export interface TurnBatchOptions {
  /** Most calls started in one turn of the event loop, over all clients. @default {@link CALLS_PER_TURN} */
  readonly perTurn?: number;
  /** Most calls one client may have waiting for their turn; more are refused `SLUICE_ERR_CLIENT_BUSY`. @default 10000 */
  readonly maxClientQueued?: number;
  /** Most calls of one client started and not yet settled (calls that wait are not counted). @default 2 x perTurn */
  readonly maxClientInFlight?: number;
}

/**
 * Calls started per turn of the loop: enough that one client alone loses nothing to the extra
 * turns (a batch of 100 takes two), few enough that a turn stays short beside a flood of batches.
 */
export const CALLS_PER_TURN = 64;

/** One client's calls waiting for their turn, oldest first (a queue without `shift`'s copying). */
class ClientQueue {
  #items: Waiting[] = [];
  #head = 0;

  get size(): number {
    return this.#items.length - this.#head;
  }

  /** Whether the next call is one that may wait (not held back by the calls in flight). */
  get nextWaits(): boolean {
    return this.#items[this.#head]?.waits === true;
  }

  push(call: Waiting): void {
    this.#items.push(call);
  }

  take(): Waiting {
    const start = this.#items[this.#head]!;
    this.#items[this.#head++] = TAKEN;
    if (this.#head >= 1024 && this.#head * 2 >= this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return start;
  }
}

/** A call waiting for its turn. */
interface Waiting {
  readonly start: () => void;
  readonly waits: boolean;
}

const TAKEN: Waiting = { start: () => undefined, waits: false };

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
  /** Client -> its calls started and not settled (only while there are some). */
  readonly #inFlight = new Map<string, number>();
  readonly #perTurn: number;
  readonly #maxClientQueued: number;
  readonly #maxClientInFlight: number;
  #scheduled = false;

  constructor(options: TurnBatchOptions = {}) {
    this.#perTurn = options.perTurn ?? CALLS_PER_TURN;
    this.#maxClientQueued = options.maxClientQueued ?? 10_000;
    this.#maxClientInFlight = options.maxClientInFlight ?? 2 * this.#perTurn;
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
   * calls waiting already. A call that may wait (`waits`: an acquire) does not count against
   * the client's calls in flight: its wait is bounded by the wait queues.
   */
  defer<T>(client: string, call: () => Promise<T>, waits = false): Promise<T> {
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
      queue.push({
        waits,
        start: () => {
          if (!waits) this.#inFlight.set(client, (this.#inFlight.get(client) ?? 0) + 1);
          const settled = () => {
            if (!waits) this.#settled(client);
          };
          try {
            call().then(
              (v) => {
                settled();
                resolve(v);
              },
              (err: unknown) => {
                settled();
                reject(err instanceof Error ? err : new Error(String(err)));
              },
            );
          } catch (err) {
            settled();
            reject(err instanceof Error ? err : new Error(String(err)));
          }
        },
      });
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(this.#run);
  }

  /** A call of `client` settled: a client held back by its calls in flight may go on. */
  #settled(client: string): void {
    const left = (this.#inFlight.get(client) ?? 1) - 1;
    if (left > 0) this.#inFlight.set(client, left);
    else this.#inFlight.delete(client);
    if (left === this.#maxClientInFlight - 1 && this.#queues.has(client)) this.#schedule();
  }

  readonly #run = (): void => {
    this.#scheduled = false;
    let budget = this.#perTurn;
    // Rounds over the clients with calls waiting, one call each; a client with its bound of
    // calls in flight (a store round trip carrying them) sits the round out.
    for (let started = true; started && budget > 0;) {
      started = false;
      for (const [client, queue] of [...this.#queues]) {
        if (budget === 0) break;
        if (!queue.nextWaits && (this.#inFlight.get(client) ?? 0) >= this.#maxClientInFlight) continue;
        const { start } = queue.take();
        // The client goes to the back of the turn order (or leaves it with nothing waiting).
        this.#queues.delete(client);
        if (queue.size > 0) this.#queues.set(client, queue);
        start();
        budget--;
        started = true;
      }
    }
    if (budget === 0 && this.#queues.size > 0) this.#schedule();
  };
}
