import type { CircuitState } from '../breakers/circuit-breaker.js';
import type { StoreCall } from '../store/store.js';
import type { Decision } from './decision.js';

/** How a decision was asked for. */
export type DecisionMode = 'try' | 'acquire' | 'book';

/**
 * Hooks the limiter calls after each decision; metrics adapters (see `@sluice/core/metrics`)
 * implement them. Hooks must be cheap and must not throw.
 */
export interface LimiterObserver {
  /**
   * Every decision returned to a caller; `tier` names the call's tier when the resource declares
   * `priority.tiers` (else it is absent). `durationMs` is the time from the call to its answer on
   * the limiter's clock (an `acquire` that queued: its wait included). The clock is read for it
   * only while this hook is set.
   */
  decided?(event: { resource: string; mode: DecisionMode; decision: Decision; tier?: string; durationMs: number }): void;
  /**
   * Every call to the store that left the process (health probes included: `ping`), once it
   * settled, with its duration on the limiter's clock and what it failed with. Calls of an
   * in-memory store, and of the fallback while the store is away, make no round trip and are
   * not reported.
   */
  storeCalled?(event: StoreCall): void;
  /** A lease refill: one round trip that took `granted` permits (0 when denied). */
  leaseRefilled?(event: { resource: string; granted: number }): void;
  /** The store became unavailable (`healthy: false`) or answered again. */
  storeSwitched?(event: { healthy: boolean }): void;
  /** Every `acquire` that queued, once it ends (granted, timed out, aborted or failed). */
  waited?(event: { resource: string; waitedMs: number; outcome: 'granted' | 'timeout' | 'aborted' | 'error' }): void;
  /**
   * A new key met the in-memory store's full key table: a key at rest was `evicted` to make room,
   * a larger group's live key was `demoted` to its group's summary, the key was `summarized`
   * (decided and charged on its own group's summary), or the call was `refused` (denied: it needed
   * a slot of its own, for held permits or bookings, and none could be made). No labels of keys or
   * resources: they are the callers' data.
   */
  keyTableFull?(event: { outcome: 'evicted' | 'demoted' | 'summarized' | 'refused' }): void;
  /** A resource's fleet-wide breaker changed state, as this process learned from the store. */
  fleetBreakerChanged?(event: { resource: string; from: CircuitState; to: CircuitState }): void;
  /** A report of outcomes failed (its outcomes were dropped). */
  outcomesFailed?(event: { resource: string; error: unknown }): void;
  /**
   * A hot key's mitigation started (`active`) or ended (see `ResourceOptions.hotKeys`). The key
   * is a caller's: keep it out of metric labels.
   */
  hotKey?(event: { resource: string; key: string; mitigation: 'lease'; active: boolean }): void;
}
