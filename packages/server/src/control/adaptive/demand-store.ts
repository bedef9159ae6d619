import type { IntervalDemand } from './policy.js';

/** Counts of one interval, as a server adds them. */
export type DemandCounts = Omit<IntervalDemand, 'start'>;

/** No counts: what a server adds to mark an interval observed. */
export const NO_DEMAND: DemandCounts = Object.freeze({ decided: 0, rejected: 0, peakShare: 0, waits: 0, waitedMs: 0 });

/**
 * Where every server's demand counts meet, and where the one decider per resource is chosen:
 * in Redis for a fleet, in memory on the embedded store.
 */
export interface DemandStore {
  /** Adds `counts` to the interval of `resource` starting at `start`, kept for `retainMs`. */
  add(resource: string, intervalMs: number, start: number, counts: DemandCounts, retainMs: number): Promise<void>;
  /** The recorded intervals of `resource` starting in `[from, to]`, oldest first. */
  read(resource: string, intervalMs: number, from: number, to: number): Promise<IntervalDemand[]>;
  /** When the resource's limit last moved, if the store remembers. */
  lastMove(resource: string): Promise<number | undefined>;
  /** Remembers a move of the resource's limit at `at` for `retainMs`. */
  recordMove(resource: string, at: number, retainMs: number): Promise<void>;
  /**
   * Takes (or keeps) the right to decide `resource` for `ttlMs`; false while another holds it.
   * At most one holder at a time, so N servers do not move a limit N times.
   */
  lead(resource: string, owner: string, ttlMs: number): Promise<boolean>;
  /** Gives the right up if `owner` holds it. */
  resign(resource: string, owner: string): Promise<void>;
  /** Frees connections the store opened. Idempotent. */
  close(): Promise<void>;
}

/** Adds `b` into `a`. */
export function addCounts(a: DemandCounts, b: DemandCounts): DemandCounts {
  return {
    decided: a.decided + b.decided,
    rejected: a.rejected + b.rejected,
    peakShare: Math.max(a.peakShare, b.peakShare),
    waits: a.waits + b.waits,
    waitedMs: a.waitedMs + b.waitedMs,
  };
}

interface Timed<T> {
  value: T;
  expiresAt: number;
}

/** Demand counts and deciders of one process (the embedded store; tests with a manual clock). */
export class MemoryDemandStore implements DemandStore {
  readonly #now: () => number;
  readonly #intervals = new Map<string, Timed<DemandCounts>>();
  readonly #moves = new Map<string, Timed<number>>();
  readonly #leaders = new Map<string, Timed<string>>();

  /** @param now milliseconds; @default Date.now */
  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  #live<T>(map: Map<string, Timed<T>>, key: string): T | undefined {
    const e = map.get(key);
    if (e === undefined) return undefined;
    if (e.expiresAt <= this.#now()) {
      map.delete(key);
      return undefined;
    }
    return e.value;
  }

  add(resource: string, intervalMs: number, start: number, counts: DemandCounts, retainMs: number): Promise<void> {
    const key = `${resource}\n${intervalMs}\n${start}`;
    const before = this.#live(this.#intervals, key) ?? NO_DEMAND;
    this.#intervals.set(key, { value: addCounts(before, counts), expiresAt: this.#now() + retainMs });
    return Promise.resolve();
  }

  read(resource: string, intervalMs: number, from: number, to: number): Promise<IntervalDemand[]> {
    const out: IntervalDemand[] = [];
    for (let start = Math.ceil(from / intervalMs) * intervalMs; start <= to; start += intervalMs) {
      const c = this.#live(this.#intervals, `${resource}\n${intervalMs}\n${start}`);
      if (c !== undefined) out.push({ start, ...c });
    }
    return Promise.resolve(out);
  }

  lastMove(resource: string): Promise<number | undefined> {
    return Promise.resolve(this.#live(this.#moves, resource));
  }

  recordMove(resource: string, at: number, retainMs: number): Promise<void> {
    this.#moves.set(resource, { value: at, expiresAt: this.#now() + retainMs });
    return Promise.resolve();
  }

  lead(resource: string, owner: string, ttlMs: number): Promise<boolean> {
    const holder = this.#live(this.#leaders, resource);
    if (holder !== undefined && holder !== owner) return Promise.resolve(false);
    this.#leaders.set(resource, { value: owner, expiresAt: this.#now() + ttlMs });
    return Promise.resolve(true);
  }

  resign(resource: string, owner: string): Promise<void> {
    if (this.#live(this.#leaders, resource) === owner) this.#leaders.delete(resource);
    return Promise.resolve();
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
