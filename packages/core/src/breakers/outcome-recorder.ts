import type { CircuitPermission, CircuitState } from './circuit-breaker.js';
import type { Clock, TimerHandle } from '../shared/clock.js';
import { MAX_REPORT_COHORTS, addTotals, type FleetBreakerPolicy, type FleetBreakerStatus } from './fleet-breaker-state.js';
import { NO_OUTCOMES, type OutcomeTotals } from './outcomes.js';
import type { CohortTotals, OutcomeStore } from '../store/store.js';

/** Settings of an {@link OutcomeRecorder}. */
export interface OutcomeRecorderSettings {
  readonly store: OutcomeStore;
  readonly resource: string;
  readonly clock: Clock;
  /** Longest time outcomes wait before being sent, and a breaker state is trusted, in ms. */
  readonly syncMs: number;
  /** A call at least this slow counts as slow, in ms. */
  readonly slowCallDurationMs: number;
  /** The resource's fleet breaker, if it has one (else outcomes are only tallied). */
  readonly breaker?: FleetBreakerPolicy;
  /** Told of every state change this process sees. */
  readonly onStateChange?: (from: CircuitState, to: CircuitState) => void;
  /** Told of every failed report (the outcomes it carried are dropped and counted). */
  readonly onError?: (error: unknown) => void;
  /** Told of every report the store took. */
  readonly onSent?: () => void;
}

/** What a recorder has seen, for status pages and metrics. */
export interface OutcomeRecorderStats {
  /** The breaker state as this process last learned it ('closed' without a breaker). */
  readonly state: CircuitState;
  /** Outcomes sent to the store. */
  readonly sent: number;
  /** Outcomes dropped: their report failed, or they named a cohort past the report's bound. */
  readonly dropped: number;
  /** Reports the store failed to take. */
  readonly errors: number;
  /** Probe permits this process was handed. */
  readonly probes: number;
}

const ALLOWED: CircuitPermission = Object.freeze({ allowed: true, state: 'closed', retryAfterMs: 0 });

/**
 * One resource's outcomes in one process, on their way to the store, and (for a resource with a
 * fleet-wide breaker) the breaker state the store answered. Outcomes are summed locally and sent
 * in one report at most `syncMs` after the first of them; each report comes back with the
 * breaker's state, which admissions trust for `syncMs`: a process making calls learns of an
 * open breaker at most `syncMs` plus one store round trip after it opened, and admits a call
 * while closed without any round trip. While half-open, each admission asks the store for one
 * of the fleet's probe permits (denied ones are trusted for up to `syncMs`).
 */
export class OutcomeRecorder {
  readonly #s: OutcomeRecorderSettings;
  #pending: OutcomeTotals = NO_OUTCOMES;
  readonly #cohorts = new Map<string, OutcomeTotals>();
  #status: FleetBreakerStatus = { state: 'closed', retryAfterMs: 0, probe: false };
  /** When #status was learned (local clock); undefined before the first answer. */
  #statusAt: number | undefined;
  #timer: TimerHandle | undefined;
  #tail: Promise<unknown> = Promise.resolve();
  #backgroundQueued = false;
  #closed = false;
  #sent = 0;
  #dropped = 0;
  #errors = 0;
  #probes = 0;

  constructor(settings: OutcomeRecorderSettings) {
    this.#s = settings;
  }

  /** The resource's fleet breaker policy, if it has one. */
  get breaker(): FleetBreakerPolicy | undefined {
    return this.#s.breaker;
  }

  /**
   * The breaker state as this process sees it now: `open` until the store's open duration ends,
   * then `half_open` (probes decide); `closed` without a breaker.
   */
  get state(): CircuitState {
    const s = this.#status;
    if (s.state === 'open' && this.#s.clock.now() >= (this.#statusAt ?? 0) + s.retryAfterMs) return 'half_open';
    return s.state;
  }

  /**
   * {@link state} for an admission decided without a round trip (a lease, the pre-filter): a
   * state heard `syncMs` ago (or never) is refreshed in the background, as by {@link admit}.
   */
  stateForAdmission(): CircuitState {
    if (this.#s.breaker !== undefined && !this.#closed) {
      const at = this.#statusAt;
      if (at === undefined || this.#s.clock.now() - at >= this.#s.syncMs) this.#background();
      // Never heard from the store: not known to be closed, so no local admission.
      if (at === undefined) return 'open';
    }
    return this.state;
  }

  /** Counters for status pages and metrics. */
  get stats(): OutcomeRecorderStats {
    return { state: this.state, sent: this.#sent, dropped: this.#dropped, errors: this.#errors, probes: this.#probes };
  }

  /** Adds one outcome (of `count` like calls), sent with the next report. */
  record(ok: boolean, durationMs: number, cohort?: string, count = 1): void {
    if (this.#closed) return;
    const t: OutcomeTotals = {
      calls: count,
      failures: ok ? 0 : count,
      slow: durationMs >= this.#s.slowCallDurationMs ? count : 0,
      totalDurationMs: Math.max(0, durationMs) * count,
    };
    this.#pending = addTotals(this.#pending, t);
    if (cohort !== undefined) {
      const had = this.#cohorts.get(cohort);
      if (had === undefined && this.#cohorts.size >= MAX_REPORT_COHORTS) this.#dropped += count;
      else this.#cohorts.set(cohort, addTotals(had ?? NO_OUTCOMES, t));
    }
    // Outside the closed state every outcome is a probe's (or re-opens): send it at once.
    if (this.#s.breaker !== undefined && this.state !== 'closed') this.#background();
    else this.#timer ??= this.#s.clock.setTimer(() => this.#onTimer(), this.#s.syncMs, true);
  }

  /**
   * Whether a call may go ahead: synchronous while the known state decides it, a store round
   * trip when a probe permit must be asked for (or before this process first heard from the
   * store).
   */
  admit(): CircuitPermission | Promise<CircuitPermission> {
    if (this.#s.breaker === undefined || this.#closed) return ALLOWED;
    const now = this.#s.clock.now();
    if (this.#statusAt === undefined) return this.#sync(false).then(() => this.#admitKnown(this.#s.clock.now()));
    if (now - this.#statusAt >= this.#s.syncMs) this.#background();
    return this.#admitKnown(now);
  }

  #admitKnown(now: number): CircuitPermission | Promise<CircuitPermission> {
    const s = this.#status;
    const at = this.#statusAt ?? now;
    if (s.state === 'closed') return ALLOWED;
    if (s.state === 'open' && now < at + s.retryAfterMs) {
      return { allowed: false, state: 'open', retryAfterMs: Math.ceil(at + s.retryAfterMs - now) };
    }
    const trusted = at + Math.min(s.retryAfterMs, this.#s.syncMs);
    if (s.state === 'half_open' && !s.probe && now < trusted) {
      return { allowed: false, state: 'half_open', retryAfterMs: Math.ceil(trusted - now) };
    }
    return this.#sync(true).then((answer): CircuitPermission => {
      if (answer === undefined) return { allowed: false, state: this.state, retryAfterMs: this.#s.syncMs };
      if (answer.state === 'closed') return ALLOWED;
      if (answer.probe) return { allowed: true, state: 'half_open', retryAfterMs: 0 };
      return { allowed: false, state: answer.state, retryAfterMs: Math.max(1, answer.retryAfterMs) };
    });
  }

  /** Sends what is pending now (resolves once the store answered, or the report failed). */
  async flush(): Promise<void> {
    await this.#sync(false);
  }

  /** Sends what is pending and stops; later outcomes are ignored. */
  async close(): Promise<void> {
    if (this.#closed) return;
    if (this.#timer !== undefined) this.#s.clock.clearTimer(this.#timer);
    this.#timer = undefined;
    if (this.#pending.calls > 0) await this.#sync(false);
    this.#closed = true;
    await this.#tail;
  }

  #onTimer(): void {
    this.#timer = undefined;
    this.#background();
  }

  /** A report in the background, unless one is already waiting to be sent. */
  #background(): void {
    if (this.#backgroundQueued || this.#closed) return;
    this.#backgroundQueued = true;
    void this.#sync(false);
  }

  /** One report, after those before it (never rejects: undefined when it failed). */
  #sync(takeProbe: boolean): Promise<FleetBreakerStatus | undefined> {
    const run = this.#tail.then(() => this.#send(takeProbe));
    this.#tail = run;
    return run;
  }

  async #send(takeProbe: boolean): Promise<FleetBreakerStatus | undefined> {
    if (!takeProbe) this.#backgroundQueued = false;
    if (this.#timer !== undefined) this.#s.clock.clearTimer(this.#timer);
    this.#timer = undefined;
    const totals = this.#pending;
    const cohorts: CohortTotals[] = [...this.#cohorts].map(([cohort, t]) => ({ cohort, totals: t }));
    this.#pending = NO_OUTCOMES;
    this.#cohorts.clear();
    const breaker = this.#s.breaker;
    if (breaker === undefined && totals.calls === 0) return undefined;
    try {
      const { breaker: status } = await this.#s.store.outcomes({
        resource: this.#s.resource,
        totals,
        ...(cohorts.length === 0 ? {} : { cohorts }),
        ...(breaker === undefined ? {} : { breaker, takeProbe }),
      });
      this.#sent += totals.calls;
      this.#s.onSent?.();
      if (status !== undefined) this.#learn(status);
      return status;
    } catch (error) {
      this.#errors++;
      this.#dropped += totals.calls;
      // Trust what was known for another period rather than asking again at once.
      if (this.#statusAt !== undefined || breaker !== undefined) this.#statusAt = this.#s.clock.now();
      this.#s.onError?.(error);
      return undefined;
    }
  }

  #learn(status: FleetBreakerStatus): void {
    const from = this.#statusAt === undefined ? 'closed' : this.state;
    this.#status = status;
    this.#statusAt = this.#s.clock.now();
    if (status.probe) this.#probes++;
    const to = this.state;
    if (from !== to) this.#s.onStateChange?.(from, to);
  }
}
