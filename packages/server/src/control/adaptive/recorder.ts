import type { Decision, LimiterObserver } from '@sluice/core';
import type { AdaptiveRules } from '@sluice/rules';
import { NO_DEMAND, type DemandCounts, type DemandStore } from './demand-store.js';

/** Options of {@link DemandRecorder}. */
export interface DemandRecorderOptions {
  readonly store: DemandStore;
  /** Milliseconds (epoch); the decider must use the same clock. @default Date.now */
  readonly now?: () => number;
  /** How often counts are added to the store, in ms. @default 1000 */
  readonly flushMs?: number;
  /** Called when adding to the store fails (the counts of that flush are dropped). */
  readonly onError?: (err: unknown) => void;
  /** Called after a flush the store took whole. */
  readonly onFlushed?: () => void;
}

interface Tracked {
  readonly intervalMs: number;
  readonly retainMs: number;
  /** Interval start -> counts not yet added. */
  readonly pending: Map<number, DemandCounts>;
}

/**
 * Counts this server's decisions on adaptive resources per interval and adds them to the
 * {@link DemandStore} every `flushMs`, where the decider reads the fleet's sum. Only resources
 * of the active rules' `adaptive` section are counted, so what it holds is bounded by the
 * rules. Every flush also marks the current interval observed (zero counts), so an idle
 * interval is told apart from one no server recorded.
 */
export class DemandRecorder {
  readonly observer: Pick<LimiterObserver, 'decided' | 'waited'>;
  readonly #store: DemandStore;
  readonly #now: () => number;
  readonly #onError: (err: unknown) => void;
  readonly #onFlushed: (() => void) | undefined;
  #tracked = new Map<string, Tracked>();
  readonly #timer: NodeJS.Timeout;
  #flushing: Promise<void> = Promise.resolve();
  #closed = false;

  constructor(options: DemandRecorderOptions) {
    this.#store = options.store;
    this.#now = options.now ?? Date.now;
    this.#onError = options.onError ?? (() => undefined);
    this.#onFlushed = options.onFlushed;
    this.observer = {
      decided: (e) => this.#decided(e.resource, e.decision),
      waited: (e) => this.#count(e.resource, (c) => ({ ...c, waits: c.waits + 1, waitedMs: c.waitedMs + e.waitedMs })),
    };
    this.#timer = setInterval(() => {
      this.#flushing = this.#flushing.then(() => this.flush());
    }, options.flushMs ?? 1000);
    this.#timer.unref();
  }

  /** Counts the resources of `rules` from now on (and stops counting the others). */
  track(rules: AdaptiveRules): void {
    const next = new Map<string, Tracked>();
    for (const [name, rule] of Object.entries(rules)) {
      const before = this.#tracked.get(name);
      // Long enough for the longest streak a policy looks back over, and the interval in progress.
      const retainMs = Math.max(rule.demand.rejectForMs, rule.demand.idleForMs) + 2 * rule.intervalMs;
      next.set(
        name,
        before?.intervalMs === rule.intervalMs
          ? { ...before, retainMs }
          : { intervalMs: rule.intervalMs, retainMs, pending: new Map() },
      );
    }
    this.#tracked = next;
  }

  #count(resource: string, update: (c: DemandCounts) => DemandCounts): void {
    const t = this.#tracked.get(resource);
    if (t === undefined) return;
    const start = Math.floor(this.#now() / t.intervalMs) * t.intervalMs;
    t.pending.set(start, update(t.pending.get(start) ?? NO_DEMAND));
  }

  #decided(resource: string, d: Decision): void {
    this.#count(resource, (c) => {
      const share = d.allowed && d.limit > 0 ? Math.min(1, Math.max(0, (d.limit - d.remaining) / d.limit)) : 0;
      return {
        ...c,
        decided: c.decided + 1,
        rejected: c.rejected + (d.allowed ? 0 : 1),
        peakShare: Math.max(c.peakShare, share),
      };
    });
  }

  /** Adds what was counted to the store. Failures are reported and those counts dropped. */
  async flush(): Promise<void> {
    const writes: Promise<void>[] = [];
    for (const [resource, t] of this.#tracked) {
      const current = Math.floor(this.#now() / t.intervalMs) * t.intervalMs;
      if (!t.pending.has(current) && !this.#closed) t.pending.set(current, NO_DEMAND);
      for (const [start, counts] of t.pending) {
        writes.push(this.#store.add(resource, t.intervalMs, start, counts, t.retainMs));
      }
      t.pending.clear();
    }
    let failed = false;
    for (const r of await Promise.allSettled(writes)) {
      if (r.status === 'rejected') {
        failed = true;
        this.#onError(r.reason);
      }
    }
    if (!failed && writes.length > 0) this.#onFlushed?.();
  }

  /** Stops the timer and adds what is left. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    await this.#flushing;
    await this.flush();
  }
}
