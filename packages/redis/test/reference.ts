/**
 * The MemoryStore's bookkeeping written out with the core's pure functions, so that a test can
 * see the states it keeps (the MemoryStore hides them) and compare them with what Redis stores.
 * Its decisions are checked against the real MemoryStore's, so it cannot drift unnoticed.
 */
import {
  adjustKey,
  concurrency,
  evaluateKey,
  reserveKey,
  type CompiledLimit,
  type ConcurrencyState,
  type ConsumeResult,
  type LimitState,
  type ReserveResult,
} from '@sluice/core';

interface Entry {
  expiresAt: number;
  limits: readonly CompiledLimit[];
  states: (LimitState | undefined)[];
}

export class ReferenceStore {
  readonly entries = new Map<string, Entry>();

  consume(
    key: string,
    limits: readonly CompiledLimit[],
    cost: number,
    leaseId: string,
    reserve: number,
    now: number,
  ): ConsumeResult {
    const o = evaluateKey(this.#read(key, limits, now)?.states ?? [], limits, cost, now, leaseId, reserve);
    if (o.allowed) this.#write(key, limits, o.next, now + o.ttlMs);
    return { allowed: o.allowed, statuses: o.statuses, now };
  }

  reserve(key: string, limits: readonly CompiledLimit[], min: number, max: number, now: number, holdMs = 0): ReserveResult {
    const o = reserveKey(this.#read(key, limits, now)?.states ?? [], limits, min, max, now, holdMs);
    if (o.granted > 0) this.#write(key, limits, o.next, now + o.ttlMs);
    return { allowed: o.granted > 0, granted: o.granted, statuses: o.statuses, now };
  }

  adjust(key: string, limits: readonly CompiledLimit[], delta: number, now: number, at = 0): void {
    const { next, ttlMs } = adjustKey(this.#read(key, limits, now)?.states ?? [], limits, delta, now, at);
    this.#write(key, limits, next, now + ttlMs);
  }

  lease(
    op: 'renew' | 'release',
    key: string,
    limits: readonly CompiledLimit[],
    leaseId: string,
    ttlMs: number | undefined,
    now: number,
  ): boolean {
    const index = limits.findIndex((l) => l.algorithm === 'concurrency');
    const limit = limits[index]!;
    const entry = this.#read(key, limits, now);
    if (entry === undefined) return false;
    const leases = entry.states[index] as ConcurrencyState | undefined;
    const r =
      op === 'renew'
        ? concurrency.renew(leases, leaseId, now, limit, ttlMs ?? limit.leaseTtlMs)
        : concurrency.release(leases, leaseId, now);
    const states = entry.states.slice();
    states[index] = r.next;
    this.#write(key, limits, states, Math.max(entry.expiresAt, now + r.ttlMs));
    return r.found;
  }

  /** The live entry of a key, aligned with its limits (what the next call would see). */
  #read(key: string, limits: readonly CompiledLimit[], now: number): Entry | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiresAt <= now) {
      this.entries.delete(key);
      return undefined;
    }
    if (entry.limits !== limits) {
      entry.states = limits.map((l) => {
        const i = entry.limits.findIndex((o) => o.id === l.id);
        if (i < 0) return undefined;
        return (entry.limits[i]!.algorithm === 'concurrency') === (l.algorithm === 'concurrency') ? entry.states[i] : undefined;
      });
      entry.limits = limits;
    }
    return entry;
  }

  #write(key: string, limits: readonly CompiledLimit[], states: (LimitState | undefined)[], expiry: number): void {
    this.entries.set(key, { expiresAt: Math.ceil(expiry), limits, states });
  }
}
