import { ClientWaits } from './client-waits.js';
import type { Clock, TimerHandle } from '../shared/clock.js';
import { withReason, type Decision } from '../shared/decision.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';

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

/** Bounds and pacing of a limiter's waits (`LimiterOptions`). */
export interface WaitSettings {
  readonly clock: Clock;
  readonly random: () => number;
  readonly maxWaitersPerKey: number;
  readonly maxWaitingKeys: number;
  readonly maxWaitersPerClient: number;
  readonly concurrencyPollMs: number;
}

/** One call that waits: which queue it joins, how its head asks, and how answers reach the caller. */
export interface WaitCall {
  readonly key: string;
  /** Which of the key's queues (see {@link WaitQueues}). */
  readonly kind: string;
  readonly cost: number;
  /** Asks for `cost` permits (the store, or its fallback). */
  decide(cost: number): Promise<Decision>;
  /** Returns what `decision` granted to a waiter that is no longer there. */
  giveBack(decision: Decision, cost: number): Promise<void>;
  /** The answer a waiter gets (observed, with the time it waited; none when it never queued). */
  answer(decision: Decision, waitedMs: number | undefined): Decision;
  /** Told when a waiter ends without an answer (aborted, closed, the store threw). */
  failed(error: unknown, waitedMs: number): void;
}

/** When and for whom one `acquire` waits. */
export interface WaitOptions {
  readonly startedAt: number;
  readonly deadline: number;
  readonly signal: AbortSignal | undefined;
  readonly client: string;
}

/**
 * A limiter's waiting callers: the queues, the pump serving each (only a queue's head asks, paced
 * by the last denial's retry-after), the bounds on queues, waiters per key and per client, and
 * the abort listeners. Owns its background work: {@link close} ends every wait and awaits it.
 */
export class Waiting {
  readonly queues = new WaitQueues();
  readonly #settings: WaitSettings;
  readonly #pumps = new Set<Promise<void>>();
  /** Queued callers per named client, for `maxWaitersPerClient` and a full table. */
  readonly #clients = new ClientWaits();
  /** One abort listener per signal, whatever the number of waits it cancels (a batch shares one). */
  readonly #aborts = new WeakMap<AbortSignal, { handlers: Set<() => void>; listener: () => void }>();
  #closed = false;

  constructor(settings: WaitSettings) {
    this.#settings = settings;
  }

  /** Queues `call` behind its key's waiters; `last` is the denial that made it wait. */
  enqueue(call: WaitCall, wait: WaitOptions, last: Decision): Promise<Decision> {
    const { clock, maxWaitersPerClient, maxWaitingKeys, maxWaitersPerKey } = this.#settings;
    const { key, kind, cost } = call;
    const { startedAt, deadline, signal, client } = wait;
    const full = () => Promise.resolve(call.answer(withReason(last, 'queue_full', false), undefined));
    if (client !== '' && this.#clients.count(client) >= maxWaitersPerClient) return full();
    let queue = this.queues.get(key, kind);
    if (queue === undefined) {
      if (this.queues.size >= maxWaitingKeys && !this.#makeRoom(client)) return full();
      queue = new WaitQueue(clock, last);
      this.queues.set(key, kind, queue);
    }
    if (queue.size >= maxWaitersPerKey) {
      // Full: a client holding fewer places than another takes the other's newest place.
      const evicted = queue.evictionFor(client);
      if (evicted === undefined) return full();
      this.#finish(queue, evicted, withReason(queue.last, 'queue_full', false));
    }
    const q = queue;
    return new Promise<Decision>((resolve, reject) => {
      const waitedMs = () => Math.max(0, clock.now() - startedAt);
      const waiter: Waiter = {
        cost,
        deadline,
        startedAt,
        client,
        inFlight: false,
        done: false,
        resolve: (d) => resolve(call.answer(d, waitedMs())),
        reject: (e) => {
          call.failed(e, waitedMs());
          reject(e instanceof Error ? e : new Error(String(e)));
        },
      };
      waiter.timer = clock.setTimer(() => {
        // A waiter whose request is in flight is answered by the pump when the store replies.
        if (!waiter.inFlight) this.#finish(q, waiter, withReason(q.last, 'wait_timeout', false));
      }, deadline - clock.now());
      if (signal !== undefined) {
        waiter.detach = this.#onAbort(signal, () =>
          this.#finish(
            q,
            waiter,
            undefined,
            new SluiceError(ErrorCodes.ABORTED, 'the wait was aborted', { cause: signal.reason }),
          ),
        );
      }
      q.add(waiter);
      this.#clients.add(client, waiter, { queue: q, key, kind });
      if (!q.running) this.#startPump(call, q, this.#pacing(last));
    });
  }

  /** Wakes every queue of `key`: permits were given back. */
  wake(key: string): void {
    this.queues.wake(key);
  }

  /**
   * Every waiting key is taken: the client holding the most waits gives up its newest queue
   * (those waits answer `queue_full`) if it holds at least two more than `client`. Without this,
   * a dozen clients at their `maxWaitersPerClient` fill the table for every other client.
   */
  #makeRoom(client: string): boolean {
    const place = this.#clients.roomFor(client);
    if (place === undefined) return false;
    const { queue, key, kind } = place;
    for (const w of queue.all()) this.#finish(queue, w, withReason(queue.last, 'queue_full', false));
    // Its pump ends on the empty queue; the place is free now, not when the pump notices.
    this.queues.delete(key, kind, queue);
    return true;
  }

  /** Ends every wait with `error` and waits for the pumps to stop. */
  async close(error: unknown): Promise<void> {
    this.#closed = true;
    for (const queue of [...this.queues.all()]) {
      for (const w of queue.all()) this.#finish(queue, w, undefined, error);
      queue.wake();
    }
    await Promise.allSettled([...this.#pumps]);
  }

  /**
   * Runs `fn` when `signal` aborts, through one listener per signal: a batch of waits sharing its
   * request's signal adds one listener, not one per item. Returns the detach function.
   */
  #onAbort(signal: AbortSignal, fn: () => void): () => void {
    let entry = this.#aborts.get(signal);
    if (entry === undefined) {
      const handlers = new Set<() => void>();
      const listener = () => {
        this.#aborts.delete(signal);
        for (const h of [...handlers]) h();
      };
      signal.addEventListener('abort', listener, { once: true });
      entry = { handlers, listener };
      this.#aborts.set(signal, entry);
    }
    const { handlers, listener } = entry;
    handlers.add(fn);
    return () => {
      handlers.delete(fn);
      // The listener goes with the last wait it served, so a long-lived signal keeps none.
      if (handlers.size === 0 && this.#aborts.get(signal)?.handlers === handlers) {
        this.#aborts.delete(signal);
        signal.removeEventListener('abort', listener);
      }
    };
  }

  #startPump(call: WaitCall, queue: WaitQueue, firstDelay: number): void {
    queue.running = true;
    const pump = this.#pump(call, queue, firstDelay).finally(() => {
      queue.running = false;
      this.#pumps.delete(pump);
      if (queue.size === 0) {
        this.queues.delete(call.key, call.kind, queue);
      } else if (!this.#closed) {
        this.#startPump(call, queue, 0);
      }
    });
    this.#pumps.add(pump);
  }

  /** Serves one key's waiters, clients in turn; only the head asks the store. */
  async #pump(call: WaitCall, queue: WaitQueue, firstDelay: number): Promise<void> {
    const { clock } = this.#settings;
    let delay = firstDelay;
    while (queue.size > 0 && !this.#closed) {
      if (delay > 0) await queue.sleep(delay);
      const head = queue.head();
      if (head === undefined || this.#closed) return;
      head.inFlight = true;
      let d: Decision;
      try {
        d = await call.decide(head.cost);
      } catch (err) {
        head.inFlight = false;
        this.#finish(queue, head, undefined, err);
        delay = 0;
        continue;
      }
      head.inFlight = false;
      if (head.done) {
        if (d.allowed) await call.giveBack(d, head.cost).catch(() => undefined);
        delay = 0;
        continue;
      }
      if (d.allowed) {
        this.#finish(queue, head, d);
        delay = 0;
        continue;
      }
      queue.last = d;
      // Its deadline passed while the store was deciding (its timer left it to this answer).
      if (head.deadline <= clock.now()) this.#finish(queue, head, withReason(d, 'wait_timeout', false));
      if (d.reason === 'circuit_open') {
        // The downstream is failing: nobody queued here should wait for it.
        for (const w of queue.all()) this.#finish(queue, w, d);
        break;
      }
      // Tell waiters who cannot be served before their deadline now, not at the deadline.
      if (d.reason === 'rate_limited') {
        const wakeAt = clock.now() + d.retryAfterMs;
        for (const w of queue.all()) {
          if (w.deadline < wakeAt) this.#finish(queue, w, withReason(d, 'wait_timeout', false));
        }
      }
      delay = this.#pacing(d);
    }
  }

  /** How long the queue sleeps after a denial: its retry-after, plus a little jitter. */
  #pacing(d: Decision): number {
    const { concurrencyPollMs, random } = this.#settings;
    const base = d.reason === 'concurrency_limited' ? Math.min(d.retryAfterMs, concurrencyPollMs) : d.retryAfterMs;
    // Jitter spreads queues of several processes that were denied at the same moment.
    return base + random() * Math.min(base * 0.05, 5);
  }

  #finish(queue: WaitQueue, w: Waiter, decision: Decision | undefined, error?: unknown): void {
    if (w.done) return;
    w.done = true;
    if (w.timer !== undefined) this.#settings.clock.clearTimer(w.timer);
    w.detach?.();
    queue.remove(w);
    this.#clients.delete(w.client, w);
    if (decision !== undefined) w.resolve(decision);
    else w.reject(error);
  }
}
