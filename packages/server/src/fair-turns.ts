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

/**
 * Work started per turn of the loop, in cost units (one unit: a one-item request; a 100-item
 * batch is about 34); a quarter of it while several clients have requests waiting, so that one
 * client's batches cannot fill a turn (and the store round trip it makes) ahead of the others'.
 */
export const WORK_PER_TURN = 64;

/** What a request costs before it is parsed: one unit, and one more per 512 bytes of it. */
export function requestCost(bytes: number): number {
  return 1 + bytes / 512;
}

/**
 * What each decoded item (an HTTP batch item, a gRPC descriptor) adds to its request's cost. A
 * batch of 100 (about 34 units) took 11-21 one-item checks' server time on the embedded store
 * and about 8 on Redis; it is charged more than its time because it holds the loop at once, for
 * 0.5-0.8 ms, and a closed-loop neighbour's next check waits behind it: charged at 1/10 of a unit
 * an item, a neighbour beside a batch flood kept 0.50-0.56x of its quiet rate on the embedded
 * store, at 1/4 0.58-0.62x (two runs each of 5 s; the bench's median since: 0.55x).
 */
export const ITEM_COST = 1 / 4;

/**
 * What a gRPC call costs beyond its bytes and descriptors, in cost units. HTTP/2 does more for
 * each call than HTTP/1.1 does for a request (a stream, its headers and trailers), outside any
 * turn: a `ShouldRateLimit` call sent one at a time took 230-280 µs of the server's loop, with or
 * without a limit override, where a one-item HTTP check took about 55 µs; a one-descriptor call
 * is charged about 6.3 units, 4.5 checks' worth.
 */
export const GRPC_CALL_COST = 5;

/**
 * What opening a connection costs its address, in cost units. Measured: an address opening 100
 * connections a second, each with one bad request (and holding 200 more with stalled bodies),
 * took 12% of the server's CPU, up to 1.2 ms a connection, against 60-90 µs for a one-item check;
 * eight checks' worth is charged, so that a client reconnecting now and then (behind a load
 * balancer) is not charged beyond that. Work done before any request reaches a turn is charged
 * here, or a client could take the loop by reconnecting instead of by asking.
 */
export const CONNECTION_COST = 8;

/**
 * Most cost units of one client's requests started and not yet answered (waiting on the store)
 * while another client has work waiting, in flight or on its way: two batches of 100 items.
 * The store answers in order, so a client with more out would put its work between the store
 * and everyone else's; alone, a client is not bounded.
 */
export const MAX_IN_FLIGHT = 64;

/** Share of the time the loop must be running for shares to be kept. */
export const BUSY = 0.8;
/** How often the loop's business is measured, ms. */
export const BUSY_WINDOW_MS = 20;
/** How far, in cost units, a client may run ahead of another that shares the loop. */
export const LEAD = 20;
/**
 * A client that usually asks again within this many ms of being served (a closed loop) keeps
 * sharing the loop for as long after it was last served: the others wait for it.
 */
export const RETURN_MS = 20;
/** A client back after this long (ms) comes in level with the others: what it did not use is not saved up. */
export const PAUSE_MS = 50;
/**
 * A client is held for a closed loop whose next request is on its way only while that loop
 * usually asks again, once its answer is out, within this many times the held request's own loop
 * time: holding trades the held request's wait (the other's turnaround) for the other's (the held
 * request's time), and leaves the loop idle meanwhile. A batch waits for a quick neighbour; a
 * one-item check does not wait for a client that takes its time to ask again (whose requests,
 * once there, still share the loop).
 */
export const HOLD_GAP_FACTOR = 4;
/** Clients not seen for this long are forgotten (they start level with the others when back), ms. */
const FORGET_MS = 1000;
/**
 * Least loop business (share of a {@link BUSY_WINDOW_MS}) and least cost units started in it for
 * the window to say what a unit costs in loop time: a loop nearly idle says nothing of it.
 */
const UNIT_SAMPLE_BUSY = 0.5;
const UNIT_SAMPLE_UNITS = 8;
/** Weight of the newest window in the moving average of a unit's loop time. */
const UNIT_SAMPLE_WEIGHT = 0.1;
/** Weight of the newest gap in the moving averages of how soon a client asks again. */
const GAP_WEIGHT = 0.25;

/** A request waiting for its turn. */
interface Waiting {
  readonly cost: number;
  readonly run: () => void;
  readonly settled: ((finish: () => void) => void) | undefined;
}

/** One client: its requests waiting, and what it was given. */
class Client {
  readonly queue: Waiting[] = [];
  head = 0;
  /** The cost units started for it, counted from where it came in level with the others. */
  given: number;
  /** When it last sent or started a request (ms). */
  lastSeen: number;
  /** When the turn that started its last request ended (ms): about when a quick answer left. */
  lastServed = Number.NEGATIVE_INFINITY;
  /** How soon it usually asks again after being served, in ms (a moving average); NaN: unknown. */
  gap = Number.NaN;
  /** When the last of its followed answers was written (ms). */
  lastAnswered = Number.NEGATIVE_INFINITY;
  /**
   * How soon it usually asks again once its answer is out, in ms (a moving average): its own
   * turnaround, without the time its request took at the store. NaN: unknown.
   */
  turnaround = Number.NaN;
  /** The cost units of its requests started and not yet answered (those whose answer is followed). */
  inFlight = 0;

  constructor(
    readonly id: string,
    given: number,
    now: number,
  ) {
    this.given = given;
    this.lastSeen = now;
  }

  get size(): number {
    return this.queue.length - this.head;
  }

  /** The request next in turn (there must be one). */
  get next(): Waiting {
    return this.queue[this.head]!;
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
 * {@link BUSY} of the time), a client may not start work more than {@link LEAD} units ahead of
 * any other client sharing the loop: one with requests waiting, or one that usually asks again
 * within {@link RETURN_MS} of being served and was served that recently (a closed loop whose next
 * request is on its way), as long as that is soon beside what the held request will take
 * ({@link HOLD_GAP_FACTOR}). So a client flooding batches of 100 gets as much of the loop as a
 * neighbour sending one-item checks one after the other, not the neighbour's share while its
 * answer travels (which a scheduler that only orders what waits would give it). A client that
 * comes back after a pause comes in level with the one given least among those waiting, so a
 * pause is not saved up; one that asks rarely holds nobody back. While the loop is not busy,
 * nothing waits beyond its turn, and a client alone is never held back.
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
  /** Clients seen in the last {@link FORGET_MS}, least recently seen first. */
  readonly #clients = new Map<string, Client>();
  /** Clients with requests waiting, next in turn first. */
  readonly #waiting = new Map<string, Client>();
  /** Clients served in the last {@link RETURN_MS}, least recently first. */
  readonly #recent = new Set<Client>();
  /** Clients with requests started and not yet answered. */
  readonly #answering = new Set<Client>();
  #measuredAt: number;
  #busy = false;
  /** Cost units started since the loop was last measured (measured extras included). */
  #unitsStarted = 0;
  /** What one cost unit takes of the loop, in ms (a moving average); NaN until measured. */
  #unitMs = Number.NaN;
  #scheduled = false;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(options: FairTurnsOptions = {}) {
    this.#perTurn = options.perTurn ?? WORK_PER_TURN;
    this.#maxClientQueued = options.maxClientQueued ?? 1000;
    this.#now = options.now ?? (() => performance.now());
    this.#utilization = options.utilization ?? loopUtilization();
    this.#onError = options.onError ?? ((err) => process.emitWarning(err instanceof Error ? err : String(err)));
    // The first turn measures the loop (since it was made).
    this.#measuredAt = Number.NEGATIVE_INFINITY;
  }

  /** How many requests wait for their turn. */
  get size(): number {
    let n = 0;
    for (const c of this.#waiting.values()) n += c.size;
    return n;
  }

  /**
   * Runs `run` in `client`'s turn. Throws `SLUICE_ERR_CLIENT_BUSY` (and `run` never runs) when
   * the client has `maxClientQueued` requests waiting already.
   *
   * With `settled`, the request counts as in flight from its start until the function `settled`
   * is handed (right after `run`) is called: its answer was written, or its connection closed.
   * A client may not have more than {@link MAX_IN_FLIGHT} units in flight while others have work.
   */
  enter(client: string, cost: number, run: () => void, settled?: (finish: () => void) => void): void {
    const now = this.#now();
    let c = this.#clients.get(client);
    if (c === undefined) {
      c = new Client(client, this.#level(), now);
    } else {
      if (c.size >= this.#maxClientQueued) {
        throw new ServerError(
          ServerErrorCodes.CLIENT_BUSY,
          `this address has ${this.#maxClientQueued} requests waiting for their turn already; retry later`,
        );
      }
      this.#clients.delete(client);
      c.lastSeen = now;
      if (c.size === 0) {
        if (c.lastServed > Number.NEGATIVE_INFINITY) {
          c.gap = movingAverage(c.gap, now - c.lastServed, GAP_WEIGHT);
          // From its last answer when that left after its last turn (a store answered it later).
          c.turnaround = movingAverage(c.turnaround, now - Math.max(c.lastServed, c.lastAnswered), GAP_WEIGHT);
        }
        // Back after a pause: level with the others, what it did not use is not saved up.
        if (now - c.lastServed > PAUSE_MS) c.given = Math.max(c.given, this.#level());
      }
    }
    this.#clients.set(client, c);
    c.queue.push({ cost, run, settled });
    if (!this.#waiting.has(client)) this.#waiting.set(client, c);
    this.#schedule();
  }

  /** Counts `cost` more as given to `client` (learned once its request was decoded). */
  charge(client: string, cost: number): void {
    const c = this.#clients.get(client);
    if (c !== undefined) c.given += cost;
  }

  /**
   * Charges `client` for a connection it opened ({@link CONNECTION_COST}). The units count as
   * started work too: the loop's time on the connection is in what a unit is measured to take.
   */
  connected(client: string): void {
    this.charge(client, CONNECTION_COST);
    this.#unitsStarted += CONNECTION_COST;
  }

  /** Stops the timer; requests still waiting never start. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** What a client coming in is given already: as much as the one given least among those waiting. */
  #level(): number {
    let level = Number.POSITIVE_INFINITY;
    for (const c of this.#waiting.values()) level = Math.min(level, c.given);
    return Number.isFinite(level) ? level : 0;
  }

  /** Whether a client other than `c` has requests waiting or in flight, or is a closed loop whose next request is on its way. */
  #othersActive(c: Client, now: number): boolean {
    for (const other of this.#waiting.values()) if (other !== c) return true;
    for (const other of this.#answering) if (other !== c) return true;
    for (const other of this.#recent) if (other !== c && this.#returning(other, now)) return true;
    return false;
  }

  /** Whether `c`, with nothing waiting, is a closed loop whose next request is on its way. */
  #returning(c: Client, now: number): boolean {
    return c.gap <= RETURN_MS && now - c.lastServed <= RETURN_MS;
  }

  /**
   * Whether `c` must wait for a client given less than it: 0 when one with requests waiting was
   * given `least` (the least of those waiting as the round began), else the time (ms) until a
   * closed loop on its way stops holding it back; undefined when `c` may go.
   */
  #heldFor(c: Client, least: number, now: number): number | undefined {
    if (c.given > least + LEAD) return 0;
    let held: number | undefined;
    // What c's next request will take of the loop (while a unit's time is unknown: no bound).
    const worth = Number.isNaN(this.#unitMs) ? Number.POSITIVE_INFINITY : c.next.cost * this.#unitMs * HOLD_GAP_FACTOR;
    for (const other of this.#recent) {
      if (other === c || other.size > 0 || c.given <= other.given + LEAD || !this.#returning(other, now)) continue;
      if (other.turnaround > worth) continue;
      const left = other.lastServed + RETURN_MS - now;
      held = held === undefined ? left : Math.min(held, left);
    }
    return held;
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
    this.#forget(now);
    if (now - this.#measuredAt >= BUSY_WINDOW_MS) this.#measure(now);
    const sharing = this.#busy && this.#clients.size > 1;
    let budget = this.#waiting.size > 1 ? this.#perTurn / 4 : this.#perTurn;
    let wait = Number.POSITIVE_INFINITY;
    const served: Client[] = [];
    // Rounds over the clients with requests waiting, one request each; while the loop is busy, a
    // client too far ahead of another sits the round out.
    for (let started = true; started && budget > 0;) {
      started = false;
      const least = sharing ? this.#level() : 0;
      for (const c of [...this.#waiting.values()]) {
        if (budget <= 0) break;
        if (sharing) {
          const held = this.#heldFor(c, least, now);
          if (held !== undefined) {
            wait = Math.min(wait, held);
            continue;
          }
        }
        // Held until some of its answers are out (their finish schedules a turn).
        if (c.inFlight >= MAX_IN_FLIGHT && this.#othersActive(c, now)) continue;
        const w = c.take();
        this.#waiting.delete(c.id);
        if (c.size > 0) this.#waiting.set(c.id, c);
        c.given += w.cost;
        c.lastSeen = now;
        budget -= w.cost;
        started = true;
        served.push(c);
        const givenBefore = c.given - w.cost;
        const from = this.#now();
        try {
          w.run();
        } catch (err) {
          this.#onError(err);
        }
        // Its cost and the items it was charged while it ran, or its time when that is more.
        const charged = c.given - givenBefore;
        // (Nothing known of a unit's time yet: its charge alone.)
        const timed = Number.isNaN(this.#unitMs) ? 0 : (this.#now() - from) / this.#unitMs;
        const units = Math.max(charged, timed);
        c.given = givenBefore + units;
        this.#unitsStarted += units;
        if (w.settled !== undefined) this.#follow(c, units, w.settled);
      }
    }
    const end = this.#now();
    for (const c of served) {
      c.lastServed = end;
      this.#recent.delete(c);
      this.#recent.add(c);
    }
    if (this.#waiting.size === 0) return;
    if (served.length > 0) {
      this.#schedule();
      return;
    }
    // Every client waiting is held back for a closed loop whose next request is on its way.
    this.#timer = setTimeout(this.#run, Math.max(1, Math.ceil(Number.isFinite(wait) ? wait : RETURN_MS)));
  };

  /** Counts `units` of `c` in flight until `settled` says the request's answer is out. */
  #follow(c: Client, units: number, settled: (finish: () => void) => void): void {
    c.inFlight += units;
    this.#answering.add(c);
    let finished = false;
    settled(() => {
      if (finished) return;
      finished = true;
      c.lastAnswered = this.#now();
      c.inFlight -= units;
      if (c.inFlight <= 1e-9) {
        c.inFlight = 0;
        this.#answering.delete(c);
      }
      if (c.size > 0) this.#schedule();
    });
  }

  /**
   * Measures the loop: whether it is busy, and, when busy enough to say, what a cost unit takes
   * of it (its running time over the units started, measured extras included, so that calls
   * charged by their time do not make the others' units look dearer).
   */
  #measure(now: number): void {
    const utilization = this.#utilization();
    this.#busy = utilization >= BUSY;
    if (Number.isFinite(this.#measuredAt) && utilization >= UNIT_SAMPLE_BUSY && this.#unitsStarted >= UNIT_SAMPLE_UNITS) {
      const unitMs = ((now - this.#measuredAt) * utilization) / this.#unitsStarted;
      this.#unitMs = movingAverage(this.#unitMs, unitMs, UNIT_SAMPLE_WEIGHT);
    }
    this.#unitsStarted = 0;
    this.#measuredAt = now;
  }

  /** Drops the clients not seen for {@link FORGET_MS} that have nothing waiting, and those served longer ago than {@link RETURN_MS} from the recent. */
  #forget(now: number): void {
    for (const c of this.#recent) {
      if (now - c.lastServed <= RETURN_MS) break;
      this.#recent.delete(c);
    }
    for (const c of this.#clients.values()) {
      if (now - c.lastSeen < FORGET_MS) break;
      this.#clients.delete(c.id);
      // Kept while it has requests waiting or in flight: a client made anew for its id would
      // otherwise count its own answers still out as another's work.
      if (c.size > 0 || c.inFlight > 0) {
        c.lastSeen = now;
        this.#clients.set(c.id, c);
      }
    }
  }
}

/**
 * A `settled` for {@link FairTurns.enter}: calls `finish` once `stream` closes, at once when it is
 * `done` already (an HTTP response written, a gRPC stream closed).
 */
export function finishOnClose(
  stream: { once(event: 'close', listener: () => void): unknown },
  done: boolean,
  finish: () => void,
): void {
  if (done) finish();
  else stream.once('close', finish);
}

/** `average` moved towards `sample` by `weight`; the sample itself while there is no average (NaN). */
function movingAverage(average: number, sample: number, weight: number): number {
  return Number.isNaN(average) ? sample : average * (1 - weight) + sample * weight;
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
