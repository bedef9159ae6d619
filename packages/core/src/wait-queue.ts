import type { Clock, TimerHandle } from './clock.js';
import type { Decision } from './decision.js';

/** One caller waiting in `acquire`. */
export interface Waiter {
  readonly cost: number;
  readonly deadline: number;
  readonly startedAt: number;
  /** Who waits (see `AcquireOptions.client`); '' when the caller named nobody. */
  readonly client: string;
  readonly resolve: (d: Decision) => void;
  readonly reject: (e: unknown) => void;
  /** Set while the pump is asking the store on this waiter's behalf. */
  inFlight: boolean;
  /** Set once resolved or rejected; a late grant is then given back. */
  done: boolean;
  timer?: TimerHandle;
  detach?: () => void;
}

/**
 * The waiters of one key, plus the pump's wakeable sleep. Only the head asks the store, paced by
 * the retry-after of the last denial, so waiters never stampede and nothing polls in a loop.
 *
 * Waiters are grouped by client and the clients take turns (round robin; arrival order within a
 * client): a client that queued a thousand waiters delays another client's waiter by one grant,
 * not by a thousand. With one client (or none named) this is plain arrival order.
 */
export class WaitQueue {
  /** client -> its waiters in arrival order; Map order is the turn order (next client first). */
  readonly #byClient = new Map<string, Waiter[]>();
  #size = 0;
  running = false;
  /** The last denial seen for this key; used to answer waiters that give up. */
  last: Decision;
  #sleepTimer: TimerHandle | undefined;
  #wake: (() => void) | undefined;

  constructor(
    private readonly clock: Clock,
    last: Decision,
  ) {
    this.last = last;
  }

  /** How many wait. */
  get size(): number {
    return this.#size;
  }

  /** The waiter served next: the oldest of the client whose turn it is. */
  head(): Waiter | undefined {
    for (const waiters of this.#byClient.values()) return waiters[0];
    return undefined;
  }

  /** Every waiter (a copy: finishing waiters while iterating it is safe). */
  all(): Waiter[] {
    return [...this.#byClient.values()].flat();
  }

  /** How many waiters `client` has queued. */
  countOf(client: string): number {
    return this.#byClient.get(client)?.length ?? 0;
  }

  add(w: Waiter): void {
    const waiters = this.#byClient.get(w.client);
    if (waiters === undefined) this.#byClient.set(w.client, [w]);
    else waiters.push(w);
    this.#size++;
  }

  /**
   * The waiter to turn away so that `client` gets a place in a full queue: the newest of the
   * client holding the most, when that client holds at least two more than `client` would.
   * Undefined when the queue is already fair to `client` (then the newcomer is turned away).
   */
  evictionFor(client: string): Waiter | undefined {
    let most: Waiter[] | undefined;
    for (const waiters of this.#byClient.values()) if (most === undefined || waiters.length > most.length) most = waiters;
    if (most === undefined || most.length < this.countOf(client) + 2) return undefined;
    return most[most.length - 1];
  }

  /**
   * Removes a waiter (no-op when absent). A served head passes the turn: its client goes to the
   * back of the turn order.
   */
  remove(w: Waiter): void {
    const waiters = this.#byClient.get(w.client);
    const i = waiters?.indexOf(w) ?? -1;
    if (waiters === undefined || i < 0) return;
    const wasHead = i === 0 && this.head() === w;
    waiters.splice(i, 1);
    this.#size--;
    if (waiters.length === 0 || wasHead) this.#byClient.delete(w.client);
    if (waiters.length > 0 && wasHead) this.#byClient.set(w.client, waiters);
    if (this.#size === 0) this.wake();
  }

  /** Sleeps `ms` unless woken earlier by {@link wake}. */
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.#wake = () => {
        if (this.#sleepTimer !== undefined) this.clock.clearTimer(this.#sleepTimer);
        this.#sleepTimer = undefined;
        this.#wake = undefined;
        resolve();
      };
      this.#sleepTimer = this.clock.setTimer(this.#wake, ms);
    });
  }

  /** Ends a sleep now, e.g. when a permit was released locally or the queue emptied. */
  wake(): void {
    this.#wake?.();
  }
}

/**
 * A limiter's wait queues: one per storage key and kind of call (priority and tenant), so each
 * waiter is decided as the call it made (a normal call is never served with core's share, nor
 * one tenant's charged to another's quota); a release or refund wakes all of a key's queues.
 */
export class WaitQueues {
  readonly #byKey = new Map<string, Map<string, WaitQueue>>();
  #count = 0;

  /** How many queues there are. */
  get size(): number {
    return this.#count;
  }

  get(key: string, kind: string): WaitQueue | undefined {
    return this.#byKey.get(key)?.get(kind);
  }

  set(key: string, kind: string, queue: WaitQueue): void {
    let kinds = this.#byKey.get(key);
    if (kinds === undefined) this.#byKey.set(key, (kinds = new Map<string, WaitQueue>()));
    if (!kinds.has(kind)) this.#count++;
    kinds.set(kind, queue);
  }

  /** Removes `queue` if it is still the one of (key, kind). */
  delete(key: string, kind: string, queue: WaitQueue): void {
    const kinds = this.#byKey.get(key);
    if (kinds?.get(kind) !== queue) return;
    kinds.delete(kind);
    this.#count--;
    if (kinds.size === 0) this.#byKey.delete(key);
  }

  /** Wakes every queue of `key`: permits were given back. */
  wake(key: string): void {
    for (const queue of this.#byKey.get(key)?.values() ?? []) queue.wake();
  }

  *all(): IterableIterator<WaitQueue> {
    for (const kinds of this.#byKey.values()) yield* kinds.values();
  }
}
