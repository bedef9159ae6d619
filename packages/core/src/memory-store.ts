import type { ConcurrencyState } from './algorithms/index.js';
import { concurrency } from './algorithms/index.js';
import { systemClock, type Clock, type TimerHandle } from './clock.js';
import { ErrorCodes, SluiceError, invalid } from './errors.js';
import { adjustKey, evaluateKey, reserveKey, type LimitState } from './evaluate.js';
import type { CompiledLimit } from './policy.js';
import type {
  AdjustRequest,
  ConsumeRequest,
  ConsumeResult,
  LeaseRequest,
  LimitStore,
  ReserveRequest,
  ReserveResult,
} from './store.js';

/** Options of {@link MemoryStore}. */
export interface MemoryStoreOptions {
  /**
   * Time source; tests pass a ManualClock.
   * @default systemClock (monotonic)
   */
  clock?: Clock;
  /**
   * Most keys held at once. Past it, expired keys and then the least recently used ones are
   * evicted, so a flood of distinct keys cannot exhaust memory.
   * @default 1_000_000
   */
  maxKeys?: number;
  /**
   * How often idle (expired) keys are swept, in ms; 0 disables the sweep (expired keys are
   * still dropped when touched or evicted).
   * @default 5000
   */
  sweepIntervalMs?: number;
  /**
   * Most keys examined per sweep, so a sweep never blocks the event loop for long.
   * @default 20_000
   */
  sweepBatch?: number;
}

interface CompiledMemoryStoreOptions {
  readonly clock: Clock;
  readonly maxKeys: number;
  readonly sweepIntervalMs: number;
  readonly sweepBatch: number;
}

function positiveInt(value: unknown, field: string, fallback: number, min: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, field, `must be an integer >= ${min}, got ${JSON.stringify(v)}`);
  }
  return v;
}

/** Validates and defaults {@link MemoryStoreOptions}. */
export function compileMemoryStoreOptions(options: MemoryStoreOptions = {}): CompiledMemoryStoreOptions {
  return Object.freeze({
    clock: options.clock ?? systemClock,
    maxKeys: positiveInt(options.maxKeys, 'maxKeys', 1_000_000, 1),
    sweepIntervalMs: positiveInt(options.sweepIntervalMs, 'sweepIntervalMs', 5000, 0),
    sweepBatch: positiveInt(options.sweepBatch, 'sweepBatch', 20_000, 1),
  });
}

/**
 * One key's state: per-limit states aligned with the limits they were written for. Memory per
 * key matters (a million keys must fit in a few hundred bytes each), so a key with a single
 * limit stores that limit's state without a wrapping array, and `expiresAt` is a whole
 * millisecond (a small integer stays unboxed).
 */
interface Entry {
  expiresAt: number;
  limits: readonly CompiledLimit[];
  packed: LimitState | (LimitState | undefined)[] | undefined;
}

function statesOf(entry: Entry): (LimitState | undefined)[] {
  return entry.limits.length === 1 ? [entry.packed as LimitState | undefined] : (entry.packed as (LimitState | undefined)[]);
}

function pack(limits: readonly CompiledLimit[], states: (LimitState | undefined)[]): Entry['packed'] {
  return limits.length === 1 ? states[0] : states;
}

/** Counters describing the store's housekeeping, for metrics and tests. */
export interface MemoryStoreStats {
  readonly keys: number;
  readonly evicted: number;
  readonly expired: number;
}

/**
 * The embedded store: all state in this process, decided synchronously on a monotonic clock.
 * Exact for one process; use the Redis store to share limits between processes.
 *
 * Keys live in a Map kept in least-recently-used order (a touched key moves to the end), so
 * both the sweep and eviction look at the front, where idle keys gather.
 */
export class MemoryStore implements LimitStore {
  readonly name = 'memory';
  readonly #options: CompiledMemoryStoreOptions;
  readonly #entries = new Map<string, Entry>();
  #sweepTimer: TimerHandle | undefined;
  #closed = false;
  #evicted = 0;
  #expired = 0;

  constructor(options: MemoryStoreOptions = {}) {
    this.#options = compileMemoryStoreOptions(options);
    this.#scheduleSweep();
  }

  /** Housekeeping counters. */
  get stats(): MemoryStoreStats {
    return { keys: this.#entries.size, evicted: this.#evicted, expired: this.#expired };
  }

  async consume(request: ConsumeRequest): Promise<ConsumeResult> {
    return this.consumeSync(request);
  }

  /** Synchronous form of {@link consume}, for callers that need no promise. */
  consumeSync(request: ConsumeRequest): ConsumeResult {
    this.#checkOpen();
    const now = this.#options.clock.now();
    const entry = this.#read(request.key, request.limits, now);
    const outcome = evaluateKey(
      entry ? statesOf(entry) : [],
      request.limits,
      request.cost,
      now,
      request.leaseId,
      request.reserve ?? 0,
    );
    if (outcome.allowed) this.#write(request.key, request.limits, outcome.next, now + outcome.ttlMs);
    return { allowed: outcome.allowed, statuses: outcome.statuses, now };
  }

  async reserve(request: ReserveRequest): Promise<ReserveResult> {
    this.#checkOpen();
    const now = this.#options.clock.now();
    const entry = this.#read(request.key, request.limits, now);
    const outcome = reserveKey(entry ? statesOf(entry) : [], request.limits, request.min, request.max, now);
    if (outcome.granted > 0) this.#write(request.key, request.limits, outcome.next, now + outcome.ttlMs);
    return { allowed: outcome.granted > 0, granted: outcome.granted, statuses: outcome.statuses, now };
  }

  async adjust(request: AdjustRequest): Promise<void> {
    this.#checkOpen();
    const now = this.#options.clock.now();
    const entry = this.#read(request.key, request.limits, now);
    const { next, ttlMs } = adjustKey(entry ? statesOf(entry) : [], request.limits, request.delta, now);
    this.#write(request.key, request.limits, next, now + ttlMs);
  }

  async renew(request: LeaseRequest): Promise<boolean> {
    return this.#lease(request, 'renew');
  }

  async release(request: LeaseRequest): Promise<boolean> {
    return this.#lease(request, 'release');
  }

  async ping(): Promise<void> {
    this.#checkOpen();
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#sweepTimer !== undefined) this.#options.clock.clearTimer(this.#sweepTimer);
    this.#sweepTimer = undefined;
    this.#entries.clear();
  }

  #lease(request: LeaseRequest, op: 'renew' | 'release'): boolean {
    this.#checkOpen();
    const index = request.limits.findIndex((l) => l.algorithm === 'concurrency');
    if (index < 0) throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'the key has no concurrency limit to hold leases');
    const limit = request.limits[index]!;
    const now = this.#options.clock.now();
    const entry = this.#read(request.key, request.limits, now);
    if (entry === undefined) return false;
    const states = statesOf(entry);
    const leases = states[index] as ConcurrencyState | undefined;
    const result =
      op === 'renew'
        ? concurrency.renew(leases, request.leaseId, now, limit, request.ttlMs ?? limit.leaseTtlMs)
        : concurrency.release(leases, request.leaseId, now);
    states[index] = result.next;
    this.#write(request.key, request.limits, states, Math.max(entry.expiresAt, now + result.ttlMs));
    return result.found;
  }

  /** The key's entry with states aligned to `limits`, or undefined when absent or expired. */
  #read(key: string, limits: readonly CompiledLimit[], now: number): Entry | undefined {
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiresAt <= now) {
      this.#entries.delete(key);
      this.#expired++;
      return undefined;
    }
    if (entry.limits !== limits) {
      // The key's policy changed (or is being used with another limit list): align states by
      // limit id so each limit finds its own state; the algorithms convert what they find.
      const old = statesOf(entry);
      const aligned = limits.map((l) => {
        const i = entry.limits.findIndex((o) => o.id === l.id);
        if (i < 0) return undefined;
        const wasConcurrency = entry.limits[i]!.algorithm === 'concurrency';
        return wasConcurrency === (l.algorithm === 'concurrency') ? old[i] : undefined;
      });
      entry.limits = limits;
      entry.packed = pack(limits, aligned);
    }
    return entry;
  }

  #write(key: string, limits: readonly CompiledLimit[], states: (LimitState | undefined)[], expiry: number): void {
    const expiresAt = Math.ceil(expiry);
    const packed = pack(limits, states);
    const existing = this.#entries.get(key);
    if (existing !== undefined) {
      // Re-inserting moves the key to the end: the Map stays in least-recently-used order.
      this.#entries.delete(key);
      existing.limits = limits;
      existing.packed = packed;
      existing.expiresAt = expiresAt;
      this.#entries.set(key, existing);
      return;
    }
    if (this.#entries.size >= this.#options.maxKeys) this.#evictOne();
    this.#entries.set(key, { expiresAt, limits, packed });
  }

  /** Drops an expired key near the front if there is one, else the least recently used key. */
  #evictOne(): void {
    const now = this.#options.clock.now();
    let scanned = 0;
    let first: string | undefined;
    for (const [key, entry] of this.#entries) {
      first ??= key;
      if (entry.expiresAt <= now) {
        this.#entries.delete(key);
        this.#expired++;
        return;
      }
      if (++scanned >= 32) break;
    }
    if (first !== undefined) {
      this.#entries.delete(first);
      this.#evicted++;
    }
  }

  /** Deletes expired keys among the least recently used, a bounded batch at a time. */
  sweep(): number {
    const now = this.#options.clock.now();
    let scanned = 0;
    let removed = 0;
    for (const [key, entry] of this.#entries) {
      if (++scanned > this.#options.sweepBatch) break;
      if (entry.expiresAt <= now) {
        this.#entries.delete(key);
        removed++;
      }
    }
    this.#expired += removed;
    return removed;
  }

  #scheduleSweep(): void {
    if (this.#options.sweepIntervalMs === 0 || this.#closed) return;
    this.#sweepTimer = this.#options.clock.setTimer(
      () => {
        this.sweep();
        this.#scheduleSweep();
      },
      this.#options.sweepIntervalMs,
      true,
    );
  }

  #checkOpen(): void {
    if (this.#closed) throw new SluiceError(ErrorCodes.CLOSED, 'the memory store is closed');
  }
}
