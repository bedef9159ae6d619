import type { LimitState } from './evaluate.js';
import type { CompiledLimit } from './policy.js';

/** A key's state as the store works with it: per-limit states aligned with `limits`. */
export interface KeyView {
  readonly expiresAt: number;
  readonly states: (LimitState | undefined)[];
}

/**
 * A key with several limits or a concurrency limit: an object holding its limits (to notice a
 * policy change) and the per-limit states.
 */
interface Entry {
  expiresAt: number;
  limits: readonly CompiledLimit[];
  states: (LimitState | undefined)[];
}

/**
 * The common case, one rate limit, packed into one array of doubles:
 * `[expiresAt, policyId, ...rateState]`. A million such keys must fit in well under 200 MB,
 * and an array of doubles costs half of an object holding a state array.
 */
type Packed = number[];

type Slot = Entry | Packed;

/** Policies are numbered so a packed slot can say which one wrote it. */
const MAX_POLICIES = 10_000;

/**
 * Where the in-memory store keeps keys: a Map of slots, bounded in size. Accesses do not
 * reorder the Map (a hot key costs the same however many keys there are); eviction samples the
 * oldest-inserted keys, drops an expired one if any, else the one that expires first (the most
 * idle: expiry is last write + the state's lifetime), and moves the other sampled keys to the
 * back so later evictions look at new ones.
 */
export class KeyTable {
  readonly #slots = new Map<string, Slot>();
  #policyIds = new WeakMap<readonly CompiledLimit[], number>();
  readonly #policies = new Map<number, readonly CompiledLimit[]>();
  #nextPolicy = 1;
  #sweepCursor: Iterator<[string, Slot]> | undefined;
  evicted = 0;
  expired = 0;

  constructor(private readonly maxKeys: number) {}

  get size(): number {
    return this.#slots.size;
  }

  /** The key's states aligned to `limits`, or undefined when absent or expired. */
  read(key: string, limits: readonly CompiledLimit[], now: number): KeyView | undefined {
    const slot = this.#slots.get(key);
    if (slot === undefined) return undefined;
    const expiresAt = expiryOf(slot);
    if (expiresAt <= now) {
      this.#slots.delete(key);
      this.expired++;
      return undefined;
    }
    const written = Array.isArray(slot) ? this.#policies.get(slot[1]!) : slot.limits;
    const states: (LimitState | undefined)[] = Array.isArray(slot) ? [slot.slice(2)] : slot.states;
    if (written === limits) return { expiresAt, states };
    if (written === undefined) return undefined;
    // The key's policy changed: align states by limit id so each limit finds its own state
    // (the algorithms convert what they find).
    const aligned = limits.map((l) => {
      const i = written.findIndex((o) => o.id === l.id);
      if (i < 0) return undefined;
      const wasConcurrency = written[i]!.algorithm === 'concurrency';
      return wasConcurrency === (l.algorithm === 'concurrency') ? states[i] : undefined;
    });
    // Keep the alignment, as the Redis script does: a limit that was removed and comes back
    // later starts afresh instead of finding its old state.
    this.#slots.set(key, this.#slot(expiresAt, limits, aligned));
    return { expiresAt, states: aligned };
  }

  write(key: string, limits: readonly CompiledLimit[], states: (LimitState | undefined)[], expiry: number, now: number): void {
    const expiresAt = Math.ceil(expiry);
    if (!this.#slots.has(key) && this.#slots.size >= this.maxKeys) this.#evictOne(now);
    this.#slots.set(key, this.#slot(expiresAt, limits, states));
  }

  #slot(expiresAt: number, limits: readonly CompiledLimit[], states: (LimitState | undefined)[]): Slot {
    const only =
      limits.length === 1 && limits[0]!.algorithm !== 'concurrency' ? (states[0] as readonly number[] | undefined) : undefined;
    return only !== undefined ? this.#pack(expiresAt, limits, only) : { expiresAt, limits, states };
  }

  clear(): void {
    this.#slots.clear();
    this.#policies.clear();
    this.#policyIds = new WeakMap();
  }

  /** Deletes expired keys, examining at most `batch` keys, continuing where the last sweep ended. */
  sweep(now: number, batch: number): number {
    let removed = 0;
    for (let i = 0; i < batch; i++) {
      this.#sweepCursor ??= this.#slots.entries();
      const next = this.#sweepCursor.next();
      if (next.done) {
        this.#sweepCursor = undefined;
        break;
      }
      const [key, slot] = next.value;
      if (expiryOf(slot) <= now) {
        this.#slots.delete(key);
        removed++;
      }
    }
    this.expired += removed;
    return removed;
  }

  #evictOne(now: number): void {
    const sampled: [string, Slot][] = [];
    for (const entry of this.#slots) {
      sampled.push(entry);
      if (sampled.length >= 32) break;
    }
    let victim = 0;
    for (let i = 1; i < sampled.length; i++) if (expiryOf(sampled[i]![1]) < expiryOf(sampled[victim]![1])) victim = i;
    const [key, slot] = sampled[victim]!;
    this.#slots.delete(key);
    if (expiryOf(slot) <= now) this.expired++;
    else this.evicted++;
    for (let i = 0; i < sampled.length; i++) {
      if (i === victim) continue;
      const [k, s] = sampled[i]!;
      this.#slots.delete(k);
      this.#slots.set(k, s);
    }
  }

  /** Builds a packed slot with an exactly sized backing store (spreads and pushes over-allocate). */
  #pack(expiresAt: number, limits: readonly CompiledLimit[], state: readonly number[]): Packed {
    const packed = new Array<number>(state.length + 2);
    packed[0] = expiresAt;
    packed[1] = this.#policyId(limits);
    for (let i = 0; i < state.length; i++) packed[i + 2] = state[i]!;
    return packed;
  }

  #policyId(limits: readonly CompiledLimit[]): number {
    let id = this.#policyIds.get(limits);
    if (id === undefined) {
      // Rule updates make new policies; a table that saw too many forgets them (their keys then
      // start afresh) rather than grow without bound.
      if (this.#policies.size >= MAX_POLICIES) {
        this.#policies.clear();
        this.#policyIds = new WeakMap();
      }
      id = this.#nextPolicy++;
      this.#policyIds.set(limits, id);
      this.#policies.set(id, limits);
    }
    return id;
  }
}

function expiryOf(slot: Slot): number {
  return Array.isArray(slot) ? slot[0]! : slot.expiresAt;
}
