import type { BookingLedger } from './booking.js';
import type { LimitState } from './evaluate.js';
import { ExpiryWheel } from './expiry-wheel.js';
import { GroupSummary } from './key-summary.js';
import { algorithmOf, type LimitVerdict, type RateAlgorithm } from '../algorithms/index.js';
import { hasConcurrency, type CompiledLimit } from '../shared/policy.js';

/** A key's state as the store works with it: per-limit states aligned with `limits`. */
export interface KeyView {
  readonly expiresAt: number;
  readonly states: (LimitState | undefined)[];
  /** The key's bookings, if it holds any (see booking.ts). */
  readonly ledger?: BookingLedger;
  /**
   * True when the key holds no slot and its states are its group's conservative summary (see
   * key-summary.ts): deciding on them never admits more than the key's own state would.
   */
  readonly summarized?: true;
}

/** Options of {@link KeyTable}. */
export interface KeyTableOptions {
  /**
   * Seed of the hash that files keys in a summary's buckets.
   * @default random
   */
  seed?: number;
  /**
   * Most limit summaries held at once (each 16 bytes per bucket).
   * @default 256
   */
  maxSummaries?: number;
}

/**
 * A key with a concurrency limit or bookings: an object holding its limits (to notice a policy
 * change) and the per-limit states.
 */
interface Entry {
  expiresAt: number;
  limits: readonly CompiledLimit[];
  states: (LimitState | undefined)[];
  ledger?: BookingLedger;
}

/**
 * A key of rate limits only, packed into one array of doubles: `[expiresAt, policyId,
 * ...state]` for one limit, `[expiresAt, policyId, length0, ...state0, length1, ...state1, ...]`
 * for several (length 0: no state). One array of doubles costs a third of an object holding an
 * array of state arrays.
 */
type Packed = number[];

type Slot = Entry | Packed;

/** The keys of one group (a resource, for the limiter's keys: the storage key up to its first `|`). */
interface Group {
  /** Slots held. */
  keys: number;
  /** Keys that may leave for the summary, in the order they came (lazily pruned). */
  queue: string[];
  head: number;
  summary: GroupSummary | undefined;
}

/** What a key's booking ledger weighs in `maxKeys`, in keys, beside one per booking. */
const LEDGER_WEIGHT = 2;

/**
 * Where the in-memory store keeps keys: a Map of slots, bounded in size. Accesses do not reorder
 * the Map (a hot key costs the same however many keys there are). A state at rest (past its
 * expiry, from which it decides exactly as no state would) leaves the table first: an
 * {@link ExpiryWheel} finds such keys in O(1) amortised, for the periodic sweep and for a new key
 * arriving at a full table.
 *
 * A full table of state that still counts is shared between groups: a new key of a group holding
 * fewer slots than the largest takes the slot of one of the largest group's keys, whose rate states
 * join that group's {@link GroupSummary}, a conservative bound that every absent key of the group
 * is decided on (so the key it stood for is never admitted more than its own state allowed). A
 * new key of the largest group is itself decided on its group's summary and charged there. Only a
 * key that needs a slot of its own (a concurrency limit's held permits, bookings) is refused, told when
 * the earliest held key comes to rest.
 */
export class KeyTable {
  readonly #slots = new Map<string, Slot>();
  /** Every key of `#slots` (and keys that left for a summary, until taken), by when it comes to rest. */
  #wheel = new ExpiryWheel();
  readonly #groups = new Map<string, Group>();
  readonly #budget: { used: number; readonly max: number };
  readonly #buckets: number;
  readonly #seed: number;
  /**
   * Policies are numbered so a packed slot can say which one wrote it. A number lives while a
   * packed slot carries it (counted in `refs`), so there are never more than keys, however many
   * policies clients make, and a live key never loses its policy.
   */
  #policyIds = new WeakMap<readonly CompiledLimit[], number>();
  readonly #policies = new Map<number, { readonly limits: readonly CompiledLimit[]; refs: number }>();
  #nextPolicy = 1;
  /** The policy numbered last (or found last): most calls are on one policy, and skip the lookups. */
  #lastPolicy = 0;
  #lastLimits: readonly CompiledLimit[] | undefined;
  /** Room taken by state kept outside the table (see {@link claimRoom}). */
  #claimed = 0;
  /** Keys at rest removed to make room for a new key. */
  evicted = 0;
  /** Keys at rest removed by the sweep. */
  expired = 0;
  /** Live keys that gave their slot to a smaller group's new key; their states joined their group's summary. */
  demoted = 0;
  /** New keys decided and charged on their group's summary: the table was full and their group the largest. */
  summarized = 0;
  /** New keys refused: they need a slot of their own and the table had none to give. */
  refused = 0;
  /** Bookings held in the keys' ledgers (see {@link bookingWeight}). */
  bookings = 0;
  /** Keys holding bookings: each ledger weighs as LEDGER_WEIGHT keys more. */
  ledgers = 0;
  /** Bookings refused because keys and bookings filled the table (see {@link roomForBooking}). */
  refusedBookings = 0;

  constructor(
    private readonly maxKeys: number,
    options: KeyTableOptions = {},
  ) {
    this.#budget = { used: 0, max: options.maxSummaries ?? 256 };
    this.#seed = options.seed ?? Math.floor(Math.random() * 2 ** 32);
    // About a sixteenth of the table per limit, at least 64 and at most 4096 buckets (64 KiB).
    this.#buckets = 2 ** Math.min(12, Math.max(6, Math.ceil(Math.log2(maxKeys / 16))));
  }

  /** Slots in use: keys held, room claimed by other state (see {@link claimRoom}), and what bookings weigh (see {@link bookingWeight}). */
  get size(): number {
    return this.#slots.size + this.#claimed + this.bookingWeight;
  }

  /** True when `key` holds a slot (at rest or not). */
  holds(key: string): boolean {
    return this.#slots.has(key);
  }

  /**
   * Takes one slot's worth of room for state kept outside the table (a booking, say) and counts it
   * in the bound, as a new key of `group` that needs a slot of its own would: from free room, a key
   * at rest, or a key of a larger group leaving for its summary. False (counted in `refused`) when
   * none; give it back with {@link returnRoom}.
   */
  claimRoom(group: string, now: number): boolean {
    if (this.size < this.maxKeys) {
      this.#claimed++;
      return true;
    }
    if (this.#removeOneAtRest(now)) this.evicted++;
    else if (!this.#demoteForGroupOf(group, now)) {
      this.refused++;
      return false;
    }
    this.#claimed++;
    return true;
  }

  /** Gives back `n` slots' worth of room taken with {@link claimRoom}. */
  returnRoom(n = 1): void {
    this.#claimed = Math.max(0, this.#claimed - n);
  }

  /** Limit summaries held (each `16 * buckets` bytes), and the buckets each has. */
  get summaries(): { readonly limits: number; readonly buckets: number } {
    return { limits: this.#budget.used, buckets: this.#buckets };
  }

  /**
   * The key's states aligned to `limits`, or undefined when it has none that count. A key without
   * a slot is read from its group's summary, if any. A key at rest stays in the table (its slot is
   * reused by the next write) until the wheel takes it.
   */
  read(key: string, limits: readonly CompiledLimit[], now: number): KeyView | undefined {
    const slot = this.#slots.get(key);
    if (slot === undefined) return this.#fromSummary(key, limits, now);
    const expiresAt = expiryOf(slot);
    if (expiresAt <= now) return undefined;
    const written = this.#limitsOf(slot);
    const states = this.#statesOf(slot);
    const ledger = Array.isArray(slot) ? undefined : slot.ledger;
    if (written === limits) return ledger === undefined ? { expiresAt, states } : { expiresAt, states, ledger };
    // The key's policy changed: align states by limit id so each limit finds its own state
    // (the algorithms convert what they find).
    const aligned = limits.map((l) => {
      const i = written.findIndex((o) => o.id === l.id);
      if (i < 0) return undefined;
      const wasRate = algorithmOf(written[i]!).rate;
      return wasRate === algorithmOf(l).rate ? states[i] : undefined;
    });
    // Keep the alignment, as the Redis script does: a limit that was removed and comes back
    // later starts afresh instead of finding its old state.
    this.#set(key, slot, this.#slot(expiresAt, limits, aligned, ledger));
    return ledger === undefined ? { expiresAt, states: aligned } : { expiresAt, states: aligned, ledger };
  }

  /**
   * The state of a key of one rate limit, as {@link read} gives it, when the key holds a packed
   * slot written under `limits` (the usual key, decided again): a copy of its state, or null when
   * it has none that counts (at rest: it decides as no state would, and a write reuses its slot).
   * Undefined otherwise (no slot, another policy, bookings): {@link read} tells then.
   */
  stateOf(key: string, limits: readonly CompiledLimit[], now: number): LimitState | null | undefined {
    const slot = this.#slots.get(key);
    if (!Array.isArray(slot) || this.#limitsOf(slot) !== limits) return undefined;
    return slot[0]! <= now || slot.length <= 2 ? null : slot.slice(2);
  }

  /**
   * `algorithm.admitInPlace` on the packed slot of a key of one rate limit written under `limits`
   * and not at rest: the key's state written over where it lies, its expiry moved on, nothing
   * allocated. Undefined, the slot untouched, when the key has no such slot or the algorithm
   * leaves the call to `evaluate` ({@link stateOf} and {@link write} tell then).
   */
  admitInPlace(
    key: string,
    limits: readonly CompiledLimit[],
    algorithm: RateAlgorithm,
    cost: number,
    now: number,
  ): Omit<LimitVerdict, 'next'> | undefined {
    const slot = this.#slots.get(key);
    if (!Array.isArray(slot) || slot[0]! <= now || slot.length <= 2 || this.#limitsOf(slot) !== limits) return undefined;
    // A packed slot of one limit: its expiry, its policy number, then the state.
    const o = algorithm.admitInPlace?.(slot, 2, cost, now, limits[0]!);
    if (o !== undefined) slot[0] = Math.ceil(now + o.ttlMs);
    return o;
  }

  /**
   * True when `key` has a slot, one could be made for it, or (`limits` given, `pinned` false) its
   * states can be kept in its group's summary. False (and counted in `refused`) when none: the
   * caller must then decide as if denied, and write nothing. `pinned`: the key will hold state
   * that cannot be summarized (bookings).
   */
  makeRoom(key: string, now: number, limits?: readonly CompiledLimit[], pinned = false): boolean {
    return this.#place(key, now, limits, pinned) !== 'refused';
  }

  /**
   * True when one more booking fits the bound (keys, claimed room and bookings together at most
   * `maxKeys`), after removing a key at rest if need be; false (counted in `refusedBookings`) otherwise.
   */
  roomForBooking(now: number): boolean {
    // Room for the worst case: the key's first booking, its ledger with it.
    if (this.size + LEDGER_WEIGHT + 1 <= this.maxKeys) return true;
    if (this.#removeOneAtRest(now)) {
      this.evicted++;
      return true;
    }
    this.refusedBookings++;
    return false;
  }

  /**
   * Milliseconds until the table surely has a key at rest: a bucket of the wheel due then holds a
   * key whose state rests by then (keys extended since they were filed are filed again first, so
   * the answer is never shorter than the wait).
   */
  roomAfterMs(now: number): number {
    const due = this.#wheel.earliest((key) => {
      const slot = this.#slots.get(key);
      return slot === undefined ? undefined : expiryOf(slot);
    }, now);
    return due === undefined ? 1 : Math.max(1, Math.ceil(due - now));
  }

  /**
   * Stores a key's states; a new key needs room first (see {@link makeRoom}): it gets a slot, or
   * its states join its group's summary, or nothing is written (false). `ledger`: the key's
   * bookings (null: none); omitted, those it holds are kept.
   */
  write(
    key: string,
    limits: readonly CompiledLimit[],
    states: (LimitState | undefined)[],
    expiry: number,
    now: number,
    ledger?: BookingLedger | null,
  ): boolean {
    const expiresAt = Math.ceil(expiry);
    const old = this.#slots.get(key);
    if (old === undefined) {
      const place = this.#place(key, now, limits, ledger !== undefined && ledger !== null);
      if (place === 'refused') return false;
      if (place === 'summary') {
        this.#summaryOf(groupName(key)).absorb(key, limits, states, now);
        this.summarized++;
        return true;
      }
    }
    // A packed slot (no bookings) of the same shape is written over in place.
    if (old !== undefined && ledger === undefined && this.#overwrite(old, limits, states, expiresAt)) return true;
    // Undefined keeps the key's bookings, but only while its entry lives: an entry that has
    // ended counts as absent, its bookings with it (a write must not bring them back).
    const kept =
      ledger === undefined
        ? old === undefined || Array.isArray(old) || expiryOf(old) <= now
          ? undefined
          : old.ledger
        : (ledger ?? undefined);
    const next = this.#slot(expiresAt, limits, states, kept);
    this.#set(key, old, next);
    if (old === undefined) this.#added(key, next, expiresAt, now);
    return true;
  }

  #place(
    key: string,
    now: number,
    limits: readonly CompiledLimit[] | undefined,
    pinned: boolean,
  ): 'slot' | 'summary' | 'refused' {
    if (this.size < this.maxKeys || this.#slots.has(key)) return 'slot';
    if (this.#removeOneAtRest(now)) {
      this.evicted++;
      return 'slot';
    }
    const name = groupName(key);
    if (this.#demoteForGroupOf(name, now)) return 'slot';
    if (!pinned && limits !== undefined && this.#summarizable(name, limits)) return 'summary';
    this.refused++;
    return 'refused';
  }

  /**
   * Frees a slot for a new key of group `name`: one of the largest other group's keys leaves for
   * its summary, if that group holds at least two slots more (so two groups never trade slots).
   */
  #demoteForGroupOf(name: string, now: number): boolean {
    const mine = this.#groups.get(name)?.keys ?? 0;
    for (;;) {
      let largest: Group | undefined;
      let largestName = '';
      for (const [n, g] of this.#groups) {
        if (n === name || g.head >= g.queue.length || g.keys <= mine + 1) continue;
        if (largest === undefined || g.keys > largest.keys) [largest, largestName] = [g, n];
      }
      if (largest === undefined) return false;
      if (this.#demoteOne(largestName, largest, now)) return true;
    }
  }

  /** Moves the group's oldest key that can be summarized to its summary; false when the queue ran out. */
  #demoteOne(name: string, group: Group, now: number): boolean {
    while (group.head < group.queue.length) {
      const key = group.queue[group.head++]!;
      const slot = this.#slots.get(key);
      if (slot === undefined || (!Array.isArray(slot) && slot.ledger !== undefined)) continue;
      const limits = this.#limitsOf(slot);
      if (expiryOf(slot) > now) {
        if (!this.#summarizable(name, limits)) continue;
        this.#summaryOf(name).absorb(key, limits, this.#statesOf(slot), now);
        this.demoted++;
      } else {
        this.evicted++;
      }
      this.#remove(key, slot);
      return true;
    }
    return false;
  }

  #summarizable(name: string, limits: readonly CompiledLimit[]): boolean {
    const summary = this.#groups.get(name)?.summary;
    if (summary !== undefined) return summary.accepts(limits);
    return !hasConcurrency(limits) && this.#budget.used + limits.length <= this.#budget.max;
  }

  #summaryOf(name: string): GroupSummary {
    const group = this.#group(name);
    group.summary ??= new GroupSummary(this.#buckets, this.#seed, this.#budget);
    return group.summary;
  }

  #fromSummary(key: string, limits: readonly CompiledLimit[], now: number): KeyView | undefined {
    if (this.#budget.used === 0) return undefined;
    const summary = this.#groups.get(groupName(key))?.summary;
    const states = summary?.statesOf(key, limits, now);
    return states === undefined ? undefined : { expiresAt: summary!.restAt, states, summarized: true };
  }

  #group(name: string): Group {
    let group = this.#groups.get(name);
    if (group === undefined) {
      group = { keys: 0, queue: [], head: 0, summary: undefined };
      this.#groups.set(name, group);
    }
    return group;
  }

  /** A new slot: counted in its group, filed on the wheel, and queued if it may be summarized. */
  #added(key: string, slot: Slot, expiresAt: number, now: number): void {
    const group = this.#group(groupName(key));
    group.keys++;
    if (Array.isArray(slot)) {
      group.queue.push(key);
      if (group.queue.length - group.head > 2 * group.keys + 64) this.#compact(group);
    }
    this.#wheel.add(key, expiresAt, now);
    // Keys that left for a summary stay filed until taken; refile when they outnumber the held.
    if (this.#wheel.size > 2 * this.#slots.size + 1024) this.#refile(now);
  }

  /** Drops queued keys no longer held, and repeats. */
  #compact(group: Group): void {
    const seen = new Set<string>();
    const queue: string[] = [];
    for (let i = group.head; i < group.queue.length; i++) {
      const key = group.queue[i]!;
      if (!seen.has(key) && this.#slots.has(key)) queue.push(key);
      seen.add(key);
    }
    group.queue = queue;
    group.head = 0;
  }

  #refile(now: number): void {
    this.#wheel = new ExpiryWheel();
    for (const [key, slot] of this.#slots) this.#wheel.add(key, expiryOf(slot), now);
  }

  #remove(key: string, slot: Slot): void {
    this.#slots.delete(key);
    this.#count(slot, -1);
    this.#release(slot);
    const name = groupName(key);
    const group = this.#groups.get(name);
    if (group === undefined) return;
    group.keys--;
    if (group.keys === 0 && group.summary === undefined) this.#groups.delete(name);
  }

  #slot(
    expiresAt: number,
    limits: readonly CompiledLimit[],
    states: (LimitState | undefined)[],
    ledger: BookingLedger | undefined,
  ): Slot {
    if (ledger !== undefined || hasConcurrency(limits)) return { expiresAt, limits, states, ledger };
    return this.#pack(expiresAt, limits, states as (readonly number[] | undefined)[]);
  }

  /**
   * Writes `states` over a packed slot of the same policy and size, in place: a key's state keeps
   * its shape from one decision to the next (a token bucket's three numbers, a full sliding
   * window's groups), so the usual write allocates nothing. False when the shapes differ.
   */
  #overwrite(old: Slot, limits: readonly CompiledLimit[], states: (LimitState | undefined)[], expiresAt: number): boolean {
    if (!Array.isArray(old) || this.#limitsOf(old) !== limits) return false;
    if (limits.length === 1) {
      const s = states[0] as readonly number[] | undefined;
      if (s === undefined || s.length + 2 !== old.length) return false;
      old[0] = expiresAt;
      for (let i = 0; i < s.length; i++) old[i + 2] = s[i]!;
      return true;
    }
    let at = 2;
    for (const s of states as (readonly number[] | undefined)[]) {
      if (at >= old.length || old[at] !== (s?.length ?? 0)) return false;
      at += 1 + old[at]!;
    }
    if (at !== old.length) return false;
    old[0] = expiresAt;
    at = 2;
    for (const s of states as (readonly number[] | undefined)[]) {
      at++;
      if (s !== undefined) for (let i = 0; i < s.length; i++) old[at++] = s[i]!;
    }
    return true;
  }

  /** Puts `next` in `key`'s slot, in place of `old` (undefined: none). */
  #set(key: string, old: Slot | undefined, next: Slot): void {
    this.#slots.set(key, next);
    this.#count(next, 1);
    if (old !== undefined) this.#count(old, -1);
    if (old !== undefined) this.#release(old);
  }

  /** A slot left the table: its policy number is freed when no packed slot carries it any more. */
  #release(slot: Slot): void {
    if (!Array.isArray(slot)) return;
    const id = slot[1]!;
    const policy = this.#policies.get(id)!;
    if (--policy.refs > 0) return;
    if (id === this.#lastPolicy) [this.#lastPolicy, this.#lastLimits] = [0, undefined];
    this.#policies.delete(id);
    this.#policyIds.delete(policy.limits);
  }

  /** How many policy numbers are in use (at most one per key). */
  get policies(): number {
    return this.#policies.size;
  }

  clear(): void {
    this.#claimed = 0;
    this.#slots.clear();
    this.#wheel.clear();
    for (const group of this.#groups.values()) group.summary?.release();
    this.#groups.clear();
    this.#policies.clear();
    this.#policyIds = new WeakMap();
    [this.#lastPolicy, this.#lastLimits] = [0, undefined];
    this.bookings = 0;
    this.ledgers = 0;
  }

  /**
   * What bookings weigh in `maxKeys`, in keys: one per booking, and LEDGER_WEIGHT per key holding
   * any (a key's first booking turns its packed slot into an object with a ledger: about 530
   * bytes, against about 170 for a packed key and 150 to 200 for each booking after it).
   */
  get bookingWeight(): number {
    return this.bookings + LEDGER_WEIGHT * this.ledgers;
  }

  #count(slot: Slot, sign: 1 | -1): void {
    const n = Array.isArray(slot) ? 0 : (slot.ledger?.bookings.length ?? 0);
    if (n === 0) return;
    this.bookings += sign * n;
    this.ledgers += sign;
  }

  /** Removes keys at rest, examining at most `batch` keys whose bucket is due; drops summaries at rest. */
  sweep(now: number, batch: number): number {
    let removed = 0;
    for (let i = 0; i < batch; i++) {
      const key = this.#wheel.takeDue(now);
      if (key === undefined) break;
      if (this.#removeIfAtRest(key, now)) removed++;
    }
    this.expired += removed;
    if (this.#budget.used > 0) {
      for (const [name, group] of this.#groups) {
        if (group.summary === undefined || !group.summary.prune(now)) continue;
        group.summary = undefined;
        if (group.keys === 0) this.#groups.delete(name);
      }
    }
    return removed;
  }

  /** Removes one key at rest, if the wheel has a due one: true when it did. */
  #removeOneAtRest(now: number): boolean {
    for (let key = this.#wheel.takeDue(now); key !== undefined; key = this.#wheel.takeDue(now)) {
      if (this.#removeIfAtRest(key, now)) return true;
    }
    return false;
  }

  /** Removes `key`, just taken off the wheel, if its state is at rest; files it again otherwise. */
  #removeIfAtRest(key: string, now: number): boolean {
    const slot = this.#slots.get(key);
    if (slot === undefined) return false;
    const expiresAt = expiryOf(slot);
    if (expiresAt <= now) {
      this.#remove(key, slot);
      return true;
    }
    this.#wheel.add(key, expiresAt, now);
    return false;
  }

  #limitsOf(slot: Slot): readonly CompiledLimit[] {
    if (!Array.isArray(slot)) return slot.limits;
    const id = slot[1]!;
    if (id === this.#lastPolicy) return this.#lastLimits!;
    const limits = this.#policies.get(id)!.limits;
    [this.#lastPolicy, this.#lastLimits] = [id, limits];
    return limits;
  }

  /** A slot's states, as fresh arrays for a packed slot. */
  #statesOf(slot: Slot): (LimitState | undefined)[] {
    if (!Array.isArray(slot)) return slot.states;
    const n = this.#limitsOf(slot).length;
    if (n === 1) return [slot.length > 2 ? slot.slice(2) : undefined];
    const states = new Array<LimitState | undefined>(n);
    for (let i = 0, at = 2; i < n; i++) {
      const length = slot[at]!;
      states[i] = length === 0 ? undefined : slot.slice(at + 1, at + 1 + length);
      at += 1 + length;
    }
    return states;
  }

  /** Builds a packed slot with an exactly sized backing store (spreads and pushes over-allocate). */
  #pack(expiresAt: number, limits: readonly CompiledLimit[], states: readonly (readonly number[] | undefined)[]): Packed {
    const one = limits.length === 1;
    let size = 2;
    for (const s of states) size += (s?.length ?? 0) + (one ? 0 : 1);
    const packed = new Array<number>(size);
    packed[0] = expiresAt;
    packed[1] = this.#policyId(limits);
    let at = 2;
    for (const s of states) {
      if (!one) packed[at++] = s?.length ?? 0;
      if (s !== undefined) for (let i = 0; i < s.length; i++) packed[at++] = s[i]!;
    }
    return packed;
  }

  /** The policy's number, counted once more (the caller packs it into a slot). */
  #policyId(limits: readonly CompiledLimit[]): number {
    const known = limits === this.#lastLimits ? this.#lastPolicy : this.#policyIds.get(limits);
    if (known !== undefined) {
      this.#policies.get(known)!.refs++;
      return known;
    }
    const id = this.#nextPolicy++;
    this.#lastPolicy = id;
    this.#lastLimits = limits;
    this.#policyIds.set(limits, id);
    this.#policies.set(id, { limits, refs: 1 });
    return id;
  }
}

/** The group of a storage key: the part before its first `|` (the resource), '' when none. */
function groupName(key: string): string {
  const bar = key.indexOf('|');
  return bar < 0 ? '' : key.slice(0, bar);
}

function expiryOf(slot: Slot): number {
  return Array.isArray(slot) ? slot[0]! : slot.expiresAt;
}
