import { MAX_DECISION_TTL_MS, type Dimension, type GovernanceDecision } from '@sluice/stream';
import type { Hold } from './partition-state.js';

/** Settings of a {@link DecisionTracker}. */
export interface DecisionTrackerSettings {
  /** TTL of each block message: a gateway lifts the block itself when no refresh came by then. */
  readonly ttlMs: number;
  /** How often an active block is sent again (well under `ttlMs`, so one lost message does not lift it). */
  readonly refreshMs: number;
}

interface Sent {
  readonly dimension: Dimension;
  readonly value: number;
  ruleId: string;
  lastSentAt: number;
}

/**
 * Turns the values held blocked (across an aggregator's partitions) into the decisions to
 * broadcast: a block when a value becomes held, the same block again every `refreshMs` while it
 * stays held, and an explicit lift when it is no longer held. A gateway that misses the lift
 * still unblocks when the TTL of the last block runs out: never a permanent false block.
 */
export class DecisionTracker {
  readonly #settings: DecisionTrackerSettings;
  #sent = new Map<string, Sent>();

  constructor(settings: DecisionTrackerSettings) {
    this.#settings = settings;
  }

  /** Values currently blocked by this tracker. */
  get active(): number {
    return this.#sent.size;
  }

  /** The decisions due at `now`, given every value held now (key -> its longest hold). */
  update(held: ReadonlyMap<string, Hold>, now: number): GovernanceDecision[] {
    const { ttlMs, refreshMs } = this.#settings;
    const out: GovernanceDecision[] = [];
    const issuedAtMs = Math.floor(now);
    for (const [key, hold] of held) {
      const sent = this.#sent.get(key);
      if (sent !== undefined && now - sent.lastSentAt < refreshMs && sent.ruleId === hold.ruleId) continue;
      // While the rule keeps firing the hold may be over already; callers retry after a refresh.
      const retryAfterMs = Math.min(MAX_DECISION_TTL_MS, Math.max(refreshMs, Math.ceil(hold.holdUntil - now)));
      out.push({
        action: 'block',
        dimension: hold.dimension,
        value: hold.value,
        ttlMs,
        retryAfterMs,
        ruleId: hold.ruleId,
        issuedAtMs,
      });
      if (sent === undefined)
        this.#sent.set(key, { dimension: hold.dimension, value: hold.value, ruleId: hold.ruleId, lastSentAt: now });
      else {
        sent.lastSentAt = now;
        sent.ruleId = hold.ruleId;
      }
    }
    for (const [key, sent] of this.#sent) {
      if (held.has(key)) continue;
      out.push({
        action: 'lift',
        dimension: sent.dimension,
        value: sent.value,
        ttlMs: 0,
        retryAfterMs: 0,
        ruleId: sent.ruleId,
        issuedAtMs,
      });
      this.#sent.delete(key);
    }
    return out;
  }

  /**
   * Stops tracking values without lifting them: their partition moved to another aggregator,
   * which restored the holds from the snapshot and refreshes or lifts them from now on.
   */
  forget(keys: Iterable<string>): void {
    for (const key of keys) this.#sent.delete(key);
  }
}
