import { ServerError, ServerErrorCodes } from './errors.js';

/** Bounds and timing of {@link FairTurns}. */
export interface FairTurnsOptions {
  /** Work started in one turn of the event loop, in cost units (see {@link requestCost}). @default {@link WORK_PER_TURN} */
  readonly perTurn?: number;
  /** Most requests of one client waiting for their turn; more are refused `SLUICE_ERR_CLIENT_BUSY`. @default 1000 */
  readonly maxClientQueued?: number;
  /** The clock, in milliseconds. @default performance.now */
  readonly now?: () => number;
  /** Gets what a request's `run` threw (the others still run). @default `process.emitWarning` */
  readonly onError?: (err: unknown) => void;
  /**
   * The share of the last {@link BUSY_WINDOW_MS} the event loop was running, 0-1: shares are
   * kept only while it is at least {@link BUSY}. @default measured (`performance.eventLoopUtilization`)
   */
  readonly utilization?: () => number;
}

/** Work started per turn of the loop, in cost units (one unit: a one-item request; a 100-item batch is about 20). */
export const WORK_PER_TURN = 16;

/** What a request costs before it is parsed: one unit, and one more per 768 bytes of it. */
export function requestCost(bytes: number): number {
  return 1 + bytes / 768;
}

/** What each decoded item (an HTTP batch item, a gRPC descriptor) adds to its request's cost. */
export const ITEM_COST = 1 / 15;

/** Share of the time the loop must be running for shares to be kept. */
export const BUSY = 0.9;
/** How often the loop's business and capacity are measured, ms. */
export const BUSY_WINDOW_MS = 20;
/** How long a client counts among those sharing the loop after its last request, ms. */
export const ACTIVE_MS = 100;
/** Credit a client may save up, in ms of its share (at least {@link MIN_BURST} units). */
const BURST_MS = 5;
const MIN_BURST = 32;
/** The loop's capacity before it is measured, in cost units per ms of running. */
const INITIAL_CAPACITY = 10;

/** A request waiting for its turn. */
interface Waiting {
  readonly cost: number;
  readonly run: () => void;
}

/** One client: its requests waiting, and its credit. */
class Client {
  readonly queue: Waiting[] = [];
  head = 0;
  /** Its credit in cost units, as of when the shared accrual stood at `creditAt`. */
  credit: number;
  creditAt: number;
  /** When it last sent or started a request (ms). */
  lastSeen: number;

  constructor(
    readonly id: string,
    credit: number,
    accrued: number,
    now: number,
  ) {
    this.credit = credit;
    this.creditAt = accrued;
    this.lastSeen = now;
  }

  get size(): number {
    return this.queue.length - this.head;
  }

  take(): Waiting {
    const w = this.queue[this.head++]!;
    if (this.head === this.queue.length) {
      this.queue.length = 0;
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
    }
    return w;
  }
}

/**
 * Shares the event loop between clients (remote addresses) by what their requests cost, and
 * starts the work of one loop turn together.
 *
 * Each request waits here before it is parsed, with a cost from its size ({@link requestCost}),
 * to which its items add once decoded ({@link charge}). While the loop is busy (running at least
 * {@link BUSY} of the time), each client that sent a request in the last {@link ACTIVE_MS} earns
 * credit at an equal share of what the loop can start per ms (its capacity, measured), saves up
 * at most {@link BURST_MS} ms of it, and starts a request only while its credit is positive; a
 * request costing more than the credit left takes it below zero, and the client waits until its
 * share has paid it back. So a client flooding batches of 100 gets the same share of the loop as
 * a neighbour sending one-item requests one after the other, and the neighbour's share does not
 * go to the flood while its next request is on its way (as it would with a scheduler that only
 * orders what waits). While the loop is not busy, nothing waits beyond its turn.
 *
 * Work starts at the end of the turn that read it (`setImmediate`), at most `perTurn` units a
 * turn, clients in turn, so the requests of one turn reach the store together: a store that
 * gathers the calls of one tick into one round trip (the Redis store) sends one for all of them.
 */
export class FairTurns {
  readonly #perTurn: number;
  readonly #maxClientQueued: number;
  readonly #now: () => number;
  readonly #utilization: () => number;
  readonly #onError: (err: unknown) => void;
  /** Clients seen in the last {@link ACTIVE_MS}, least recently seen first. */
  readonly #clients = new Map<string, Client>();
  /** Clients with requests waiting, next in turn first. */
  readonly #waiting = new Map<string, Client>();
  /** What each active client has earned since the start, in cost units. */
  #accrued = 0;
  #accruedAt: number;
  /** Cost units the loop starts per ms of running (a moving average). */
  #capacity = INITIAL_CAPACITY;
  /** Cost units started since the last measure. */
  #started = 0;
  #measuredAt: number;
  #busy = false;
  /** Clients held back for want of credit since the last measure. */
  readonly #held = new Set<Client>();
  #scheduled = false;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(options: FairTurnsOptions = {}) {
    this.#perTurn = options.perTurn ?? WORK_PER_TURN;
    this.#maxClientQueued = options.maxClientQueued ?? 1000;
    this.#now = options.now ?? (() => performance.now());
    this.#utilization = options.utilization ?? loopUtilization();
    this.#onError = options.onError ?? ((err) => process.emitWarning(err instanceof Error ? err : String(err)));
    this.#accruedAt = this.#measuredAt = this.#now();
  }

  /** How many requests wait for their turn. */
  get size(): number {
    let n = 0;
    for (const c of this.#waiting.values()) n += c.size;
    return n;
  }

  /** Whether shares are being kept (the loop was busy at the last measure). */
  get busy(): boolean {
    return this.#busy;
  }

  /**
   * Runs `run` in `client`'s turn. Throws `SLUICE_ERR_CLIENT_BUSY` (and `run` never runs) when
   * the client has `maxClientQueued` requests waiting already.
   */
  enter(client: string, cost: number, run: () => void): void {
    const now = this.#now();
    let c = this.#clients.get(client);
    if (c === undefined) {
      c = new Client(client, this.#burst(), this.#accrued, now);
    } else {
      if (c.size >= this.#maxClientQueued) {
        throw new ServerError(
          ServerErrorCodes.CLIENT_BUSY,
          `this address has ${this.#maxClientQueued} requests waiting for their turn already; retry later`,
        );
      }
      this.#clients.delete(client);
      c.lastSeen = now;
    }
    this.#clients.set(client, c);
    c.queue.push({ cost, run });
    if (!this.#waiting.has(client)) this.#waiting.set(client, c);
    this.#schedule();
  }

  /** Takes `cost` more from `client`'s credit (learned once its request was decoded). */
  charge(client: string, cost: number): void {
    const c = this.#clients.get(client);
    if (c === undefined) return;
    this.#settle(c);
    c.credit -= cost;
    this.#started += cost;
  }

  /** Stops the timer; requests still waiting never start. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #burst(): number {
    return Math.max(MIN_BURST, this.#capacity * BURST_MS);
  }

  /**
   * Brings `c`'s credit up to date with what it earned since: at most the burst, and, while the
   * loop is not busy, no more than a burst below zero (what it took of an idle loop is forgiven).
   */
  #settle(c: Client): void {
    const burst = this.#burst();
    c.credit = Math.min(burst, c.credit + (this.#accrued - c.creditAt));
    if (!this.#busy && c.credit < -burst) c.credit = -burst;
    c.creditAt = this.#accrued;
  }

  #schedule(): void {
    if (this.#scheduled || this.#closed) return;
    this.#scheduled = true;
    setImmediate(this.#run);
  }

  readonly #run = (): void => {
    this.#scheduled = false;
    if (this.#closed) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const now = this.#now();
    this.#accrue(now);
    if (now - this.#measuredAt >= BUSY_WINDOW_MS) this.#measure(now);
    let budget = this.#perTurn;
    let short = Number.POSITIVE_INFINITY;
    // Rounds over the clients with requests waiting, one request each; while the loop is busy, a
    // client out of credit sits the round out.
    for (let started = true; started && budget > 0;) {
      started = false;
      for (const c of [...this.#waiting.values()]) {
        if (budget <= 0) break;
        this.#settle(c);
        if (c.credit <= 0 && this.#sharing()) {
          this.#held.add(c);
          short = Math.min(short, -c.credit);
          continue;
        }
        const w = c.take();
        this.#waiting.delete(c.id);
        if (c.size > 0) this.#waiting.set(c.id, c);
        c.credit -= w.cost;
        c.lastSeen = now;
        this.#started += w.cost;
        budget -= w.cost;
        started = true;
        try {
          w.run();
        } catch (err) {
          this.#onError(err);
        }
      }
    }
    if (this.#waiting.size === 0) return;
    if (budget <= 0) {
      this.#schedule();
      return;
    }
    // Every client waiting is out of credit: start again once the one owed least has earned it.
    const rate = this.#capacity / Math.max(1, this.#clients.size);
    this.#timer = setTimeout(this.#run, Math.max(1, Math.ceil(short / rate)));
  };

  /** Drops the clients gone quiet, and credits each active one its share of the time since the last accrual. */
  #accrue(now: number): void {
    for (const c of this.#clients.values()) {
      if (now - c.lastSeen < ACTIVE_MS) break;
      this.#clients.delete(c.id);
      // A client still waiting stays active (at the back: it is seen now).
      if (c.size > 0) {
        c.lastSeen = now;
        this.#clients.set(c.id, c);
      }
    }
    const n = Math.max(1, this.#clients.size);
    this.#accrued += ((now - this.#accruedAt) * this.#capacity) / n;
    this.#accruedAt = now;
  }

  /** Whether a client out of credit waits for its share: while the loop is busy and others share it. */
  #sharing(): boolean {
    return this.#busy && this.#clients.size > 1;
  }

  /** Whether the loop is busy, and what it starts per ms of running. */
  #measure(now: number): void {
    const utilization = this.#utilization();
    const runningMs = (now - this.#measuredAt) * utilization;
    if (this.#held.size > 1 && utilization < BUSY) {
      // Several clients ran out of credit while the loop had time: the capacity was set too low.
      this.#capacity *= 1.25;
    } else if (runningMs >= BUSY_WINDOW_MS / 4 && this.#started > 0) {
      // Measured only when the loop ran enough for the figure to mean something.
      this.#capacity = this.#capacity * 0.8 + (this.#started / runningMs) * 0.2;
    }
    this.#busy = utilization >= BUSY;
    this.#held.clear();
    this.#started = 0;
    this.#measuredAt = now;
  }
}

/** The event loop's utilization since the last call, 0-1. */
function loopUtilization(): () => number {
  let mark = performance.eventLoopUtilization();
  return () => {
    const d = performance.eventLoopUtilization(mark);
    mark = performance.eventLoopUtilization();
    return d.utilization;
  };
}
