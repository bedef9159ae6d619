import { DIMENSIONS, EventOutcome, type Dimension, type GatewayEvent, type RejectionTally } from '@sluice/stream';
import type { CompiledRule } from './rules.js';
import { WindowTable } from './window-table.js';
import { AddResult, addEvent, sliceOf } from './window.js';

/** A value a rule blocks, and until when at least. */
export interface Hold {
  readonly ruleId: string;
  readonly dimension: Dimension;
  readonly value: number;
  /** The block lasts at least until then (epoch ms), longer while the rule keeps firing. */
  holdUntil: number;
}

/** Counters of one partition's state. */
export interface PartitionCounters {
  /** Events counted by at least one rule. */
  events: number;
  /** Events older than a rule's window when they arrived. */
  late: number;
  /** Expression evaluations that failed (counted as not firing). */
  expressionErrors: number;
  /** Rejected requests (from tallies) counted by at least one rule. */
  rejected: number;
}

/** The key of a blocked value: one block per dimension value, whichever rules hold it. */
export function holdKey(dimension: Dimension, value: number): string {
  return `${dimension}:${value}`;
}

/**
 * The governance state of one partition: each rule's windows over its values, and the values
 * the rules currently hold blocked. Pure apart from the `now` it is given.
 */
export class PartitionState {
  readonly partition: number;
  readonly maxValues: number;
  #rules: CompiledRule[] = [];
  #tables = new Map<string, WindowTable>();
  /** hold key -> holds of that value by rule id. */
  #holds = new Map<string, Map<string, Hold>>();
  readonly counters: PartitionCounters = { events: 0, late: 0, expressionErrors: 0, rejected: 0 };

  constructor(partition: number, rules: readonly CompiledRule[], maxValues: number) {
    this.partition = partition;
    this.maxValues = maxValues;
    this.setRules(rules);
  }

  /**
   * Switches to new rules. A rule whose signature (what it counts) is unchanged keeps its
   * windows; holds of rules that are gone are dropped (their values are lifted).
   */
  setRules(rules: readonly CompiledRule[]): void {
    const tables = new Map<string, WindowTable>();
    for (const r of rules) {
      const old = this.#tables.get(r.id);
      const kept = old !== undefined && this.#rules.find((o) => o.id === r.id)?.signature === r.signature;
      tables.set(r.id, kept ? old : new WindowTable(r.shape, this.maxValues));
    }
    this.#rules = [...rules];
    this.#tables = tables;
    for (const [key, byRule] of this.#holds) {
      for (const id of byRule.keys()) if (!tables.has(id)) byRule.delete(id);
      if (byRule.size === 0) this.#holds.delete(key);
    }
  }

  get rules(): readonly CompiledRule[] {
    return this.#rules;
  }

  /** The table of a rule. */
  table(ruleId: string): WindowTable | undefined {
    return this.#tables.get(ruleId);
  }

  /** Values tracked over every rule. */
  get trackedValues(): number {
    let n = 0;
    for (const t of this.#tables.values()) n += t.size;
    return n;
  }

  /** Evictions over every rule. */
  get evictions(): number {
    let n = 0;
    for (const t of this.#tables.values()) n += t.evictions;
    return n;
  }

  /** Counts events in every rule they match, each with `weight` (more than 1 when sampled). */
  ingest(events: readonly GatewayEvent[], now: number, weight = 1): void {
    const rules = this.#rules;
    for (const e of events) {
      let counted = false;
      for (const r of rules) {
        if (!r.matches(e)) continue;
        const table = this.#tables.get(r.id)!;
        const w = table.windowFor(e[r.dimension], now);
        const result = addEvent(w, r.shape, now, e.timestampMs, e.status, e.outcome === EventOutcome.ERROR, weight);
        if (result === AddResult.TOO_OLD) this.counters.late++;
        else counted = true;
      }
      if (counted) this.counters.events++;
    }
  }

  /**
   * Counts requests that gateways rejected, as offered load, in every rule that counts all
   * requests ({@link CompiledRule.countsRejected}) and whose conditions the tally satisfies. A
   * tally knows the resource, the path and the blocked value only, so a rule on another
   * dimension (or with a condition on one) does not count it. Rejections count as requests
   * only: no status class, no error. A tally spanning several slices is spread evenly over them.
   *
   * `at` (at most `now`) is the partition's watermark ({@link evaluate}): a tally is late only
   * when it is older than the window at `at`, so the tallies a lagging stream delivers late
   * still count for the block they keep.
   */
  ingestTallies(tallies: readonly RejectionTally[], now: number, at = now): void {
    const rules = this.#rules;
    const probe: GatewayEvent = { resource: 0, path: 0, user: 0, ip: 0, tenant: 0, timestampMs: 0, status: 0, outcome: 0 };
    for (const t of tallies) {
      probe.resource = t.resource;
      probe.path = t.path;
      probe.user = probe.ip = probe.tenant = 0;
      probe[t.dimension] = t.value;
      let matched = false;
      let counted = false;
      for (const r of rules) {
        if (!r.countsRejected || !r.matches(probe)) continue;
        matched = true;
        const table = this.#tables.get(r.id)!;
        const w = table.windowFor(probe[r.dimension], now);
        const last = sliceOf(r.shape, t.lastMs);
        const first = Math.max(sliceOf(r.shape, t.lastMs - t.spanMs), last - r.shape.slices + 1);
        // Whole shares (windows and snapshots count integers), the remainder in the newest slices.
        const n = last - first + 1;
        const base = Math.floor(t.count / n);
        const extra = t.count - base * n;
        for (let k = 0; k < n; k++) {
          const share = base + (k >= n - extra ? 1 : 0);
          if (share === 0) continue;
          const t0 = k === n - 1 ? t.lastMs : (first + k) * r.shape.sliceMs;
          if (addEvent(w, r.shape, at, t0, 0, false, share) === AddResult.ADDED) counted = true;
        }
      }
      if (counted) this.counters.rejected += t.count;
      else if (matched) this.counters.late++;
    }
  }

  /**
   * Evaluates every rule on every tracked value at `now`: a firing value is held for at least
   * the rule's `blockMs` from when it first fired, and for as long as it keeps firing; a hold
   * whose time is up and whose rule no longer fires ends. Idle values are pruned.
   *
   * `at` (at most `now`) is the partition's watermark: the time up to which its stream is known
   * to have been read. While the stream lags, the window at `now` misses what is still on its
   * way, so a held value stays held while its rule fires at `now` or at `at`: a block is not
   * lifted on a window that late deliveries have not filled yet. New holds start only from a
   * rule firing at `now` (a stream catching up does not block on traffic that has ended).
   */
  evaluate(now: number, at = now): void {
    const firing = new Set<string>();
    for (const r of this.#rules) {
      const table = this.#tables.get(r.id)!;
      table.prune(Math.min(now, at));
      for (const [value, w] of table.entries()) {
        const key = holdKey(r.dimension, value);
        const held = this.#holds.get(key)?.has(r.id) === true;
        let fires: boolean;
        try {
          fires = r.fires(w, now) || (held && at < now && r.fires(w, at));
        } catch {
          this.counters.expressionErrors++;
          fires = false;
        }
        if (!fires) continue;
        firing.add(`${r.id}\u0000${key}`);
        const byRule = this.#holdsOf(key);
        if (!byRule.has(r.id)) byRule.set(r.id, { ruleId: r.id, dimension: r.dimension, value, holdUntil: now + r.blockMs });
      }
    }
    for (const [key, byRule] of this.#holds) {
      for (const [id, hold] of byRule) {
        if (hold.holdUntil <= now && !firing.has(`${id}\u0000${key}`)) byRule.delete(id);
      }
      if (byRule.size === 0) this.#holds.delete(key);
    }
  }

  /** Values held blocked now: key -> the hold that lasts longest. */
  holds(): Map<string, Hold> {
    const out = new Map<string, Hold>();
    for (const [key, byRule] of this.#holds) {
      let best: Hold | undefined;
      for (const h of byRule.values()) if (best === undefined || h.holdUntil > best.holdUntil) best = h;
      if (best !== undefined) out.set(key, best);
    }
    return out;
  }

  /** Every hold, for snapshots. */
  allHolds(): Hold[] {
    return [...this.#holds.values()].flatMap((m) => [...m.values()]);
  }

  /** Puts back a hold from a snapshot (ignored when its rule is gone). */
  restoreHold(hold: Hold): void {
    if (!this.#tables.has(hold.ruleId) || !DIMENSIONS.includes(hold.dimension)) return;
    this.#holdsOf(holdKey(hold.dimension, hold.value)).set(hold.ruleId, { ...hold });
  }

  /** The holds of one value by rule id, created empty when there are none. */
  #holdsOf(key: string): Map<string, Hold> {
    let byRule = this.#holds.get(key);
    if (byRule === undefined) {
      byRule = new Map();
      this.#holds.set(key, byRule);
    }
    return byRule;
  }
}
