import { systemClock, type Clock } from '../shared/clock.js';
import { ErrorCodes, invalid } from '../shared/errors.js';
import type { FleetBreakerPolicy } from './fleet-breaker-state.js';

/** Options of {@link CircuitBreaker}. */
export interface CircuitBreakerOptions {
  /** Length of the window over which calls are judged, in ms. @default 10000 */
  windowMs?: number;
  /** Buckets the window is divided into (it slides one bucket at a time). @default 10 */
  buckets?: number;
  /** Fewest calls in the window before the breaker may open. @default 20 */
  minimumCalls?: number;
  /** Opens when failed calls / calls reaches this. @default 0.5 */
  failureRateThreshold?: number;
  /** A call slower than this counts as slow, in ms. @default 1000 */
  slowCallDurationMs?: number;
  /** Opens when slow calls / calls reaches this; 1 means only when every call is slow. @default 1 */
  slowCallRateThreshold?: number;
  /** How long the breaker stays open before letting probes through, in ms. @default 5000 */
  openDurationMs?: number;
  /** Probe calls allowed while half-open; all must succeed (and be fast) to close. @default 3 */
  halfOpenProbes?: number;
  /**
   * Where the breaker's judgement is made. `process`: each process judges its own calls.
   * `fleet`: every process sharing the store reports its outcomes there and follows one state
   * (the store must keep breakers: the memory and Redis stores do); see docs/control-plane.md.
   * @default 'process'
   */
  scope?: 'process' | 'fleet';
  /**
   * With `scope: 'fleet'`: longest time a process keeps outcomes before reporting them, and
   * trusts the state it last heard, in ms. A process making calls sees the fleet's state at
   * most this long (plus one store round trip) after it changed.
   * @default 500
   */
  syncMs?: number;
  /** @default systemClock */
  clock?: Clock;
}

/** A fleet-wide breaker's settings, compiled (see {@link CircuitBreakerOptions.scope}). */
export interface CompiledFleetBreaker {
  readonly policy: FleetBreakerPolicy;
  readonly syncMs: number;
  readonly slowCallDurationMs: number;
}

/** Validates breaker options and, for `scope: 'fleet'`, compiles what the store judges by. */
export function compileFleetBreaker(options: CircuitBreakerOptions): CompiledFleetBreaker | undefined {
  const { syncMs, slowCallDurationMs, ...policy } = breakerSettings(options);
  if (options.scope !== 'fleet') return undefined;
  return Object.freeze({ policy: Object.freeze(policy), syncMs, slowCallDurationMs });
}

/** Every setting of a breaker, validated, defaults filled in (one place for both scopes). */
function breakerSettings(options: CircuitBreakerOptions): FleetBreakerPolicy & { syncMs: number; slowCallDurationMs: number } {
  if (options.scope !== undefined && options.scope !== 'process' && options.scope !== 'fleet') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'scope', "must be 'process' or 'fleet'");
  }
  return {
    windowMs: num(options.windowMs, 'windowMs', 10_000, 100, 3_600_000),
    buckets: num(options.buckets, 'buckets', 10, 1, 1000),
    minimumCalls: num(options.minimumCalls, 'minimumCalls', 20, 1, 1_000_000),
    failureRateThreshold: num(options.failureRateThreshold, 'failureRateThreshold', 0.5, 0.01, 1, false),
    slowCallRateThreshold: num(options.slowCallRateThreshold, 'slowCallRateThreshold', 1, 0.01, 1, false),
    openDurationMs: num(options.openDurationMs, 'openDurationMs', 5000, 1, 3_600_000),
    halfOpenProbes: num(options.halfOpenProbes, 'halfOpenProbes', 3, 1, 1000),
    syncMs: num(options.syncMs, 'syncMs', 500, 10, 60_000),
    slowCallDurationMs: num(options.slowCallDurationMs, 'slowCallDurationMs', 1000, 1, 3_600_000),
  };
}

/** `closed`: calls pass; `open`: calls are rejected; `half_open`: a few probes pass. */
export type CircuitState = 'closed' | 'open' | 'half_open';

/** What the breaker says about a call about to be made. */
export interface CircuitPermission {
  readonly allowed: boolean;
  readonly state: CircuitState;
  /** When rejected: ms until probes are let through. */
  readonly retryAfterMs: number;
}

interface Bucket {
  index: number;
  calls: number;
  failures: number;
  slow: number;
}

function num(v: unknown, field: string, fallback: number, min: number, max: number, integer = true): number {
  const x = v ?? fallback;
  if (typeof x !== 'number' || Number.isNaN(x) || x < min || x > max || (integer && !Number.isInteger(x))) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, field, `must be ${integer ? 'an integer' : 'a number'} between ${min} and ${max}`);
  }
  return x;
}

/**
 * A circuit breaker for one downstream resource. Limits protect a downstream from too many
 * calls; a breaker protects it when the limits were set too high and it is failing anyway:
 * once the failure or slow-call ratio over a sliding window passes its threshold (with enough
 * calls to judge), calls are rejected fast for `openDurationMs`, then a few probes decide
 * whether to close again or re-open.
 *
 * @example
 * const breaker = new CircuitBreaker({ failureRateThreshold: 0.5, minimumCalls: 20 });
 * const p = breaker.tryPass();
 * if (!p.allowed) return fail(`circuit open, retry in ${p.retryAfterMs} ms`);
 * const started = performance.now();
 * try { await call(); breaker.record(true, performance.now() - started); }
 * catch (e) { breaker.record(false, performance.now() - started); throw e; }
 */
export class CircuitBreaker {
  readonly #clock: Clock;
  readonly #bucketMs: number;
  readonly #buckets: Bucket[];
  readonly #minimumCalls: number;
  readonly #failureRate: number;
  readonly #slowMs: number;
  readonly #slowRate: number;
  readonly #openMs: number;
  readonly #probes: number;
  #state: CircuitState = 'closed';
  #openedAt = 0;
  #probesStarted = 0;
  #probesSucceeded = 0;
  #lastProbeAt = 0;
  /** Called on every state change (for logs and metrics). */
  onStateChange: ((from: CircuitState, to: CircuitState) => void) | undefined;

  constructor(options: CircuitBreakerOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    const s = breakerSettings(options);
    this.#bucketMs = s.windowMs / s.buckets;
    this.#buckets = Array.from({ length: s.buckets }, () => ({ index: -1, calls: 0, failures: 0, slow: 0 }));
    this.#minimumCalls = s.minimumCalls;
    this.#failureRate = s.failureRateThreshold;
    this.#slowMs = s.slowCallDurationMs;
    this.#slowRate = s.slowCallRateThreshold;
    this.#openMs = s.openDurationMs;
    this.#probes = s.halfOpenProbes;
  }

  /** The current state (an open breaker past its open duration reports `half_open`). */
  get state(): CircuitState {
    this.#maybeHalfOpen();
    return this.#state;
  }

  /** Asks whether a call may go ahead; a permitted half-open call counts as a probe. */
  tryPass(): CircuitPermission {
    this.#maybeHalfOpen();
    if (this.#state === 'closed') return { allowed: true, state: 'closed', retryAfterMs: 0 };
    // Probes whose outcome never came back (the caller forgot to record) must not wedge the
    // breaker half-open: after another open duration, new probes go through.
    if (this.#state === 'half_open' && this.#clock.now() - this.#lastProbeAt >= this.#openMs)
      this.#probesStarted = this.#probesSucceeded;
    if (this.#state === 'half_open' && this.#probesStarted < this.#probes) {
      this.#probesStarted++;
      this.#lastProbeAt = this.#clock.now();
      return { allowed: true, state: 'half_open', retryAfterMs: 0 };
    }
    const retryAfterMs =
      this.#state === 'open' ? Math.max(0, Math.ceil(this.#openedAt + this.#openMs - this.#clock.now())) : this.#openMs;
    return { allowed: false, state: this.#state, retryAfterMs };
  }

  /** Records the outcome of a permitted call. */
  record(success: boolean, durationMs: number): void {
    const slow = durationMs >= this.#slowMs;
    if (this.#state === 'half_open') {
      if (!success || slow) {
        this.#transition('open');
        return;
      }
      if (++this.#probesSucceeded >= this.#probes) this.#transition('closed');
      return;
    }
    if (this.#state === 'open') return; // a call that started before the breaker opened
    const b = this.#bucket();
    b.calls++;
    if (!success) b.failures++;
    if (slow) b.slow++;
    const { calls, failures, slowCalls } = this.stats();
    if (calls >= this.#minimumCalls && (failures / calls >= this.#failureRate || slowCalls / calls >= this.#slowRate)) {
      this.#transition('open');
    }
  }

  /** Calls, failures and slow calls in the current window. */
  stats(): { calls: number; failures: number; slowCalls: number } {
    const current = Math.floor(this.#clock.now() / this.#bucketMs);
    let calls = 0;
    let failures = 0;
    let slowCalls = 0;
    for (const b of this.#buckets) {
      if (b.index > current - this.#buckets.length) {
        calls += b.calls;
        failures += b.failures;
        slowCalls += b.slow;
      }
    }
    return { calls, failures, slowCalls };
  }

  #bucket(): Bucket {
    const index = Math.floor(this.#clock.now() / this.#bucketMs);
    const b = this.#buckets[index % this.#buckets.length]!;
    if (b.index !== index) {
      b.index = index;
      b.calls = b.failures = b.slow = 0;
    }
    return b;
  }

  #maybeHalfOpen(): void {
    if (this.#state === 'open' && this.#clock.now() >= this.#openedAt + this.#openMs) this.#transition('half_open');
  }

  #transition(to: CircuitState): void {
    const from = this.#state;
    if (from === to) return;
    this.#state = to;
    if (to === 'open') this.#openedAt = this.#clock.now();
    this.#lastProbeAt = this.#clock.now();
    this.#probesStarted = 0;
    this.#probesSucceeded = 0;
    if (to === 'closed') for (const b of this.#buckets) b.index = -1;
    this.onStateChange?.(from, to);
  }
}
