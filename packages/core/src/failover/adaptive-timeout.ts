import { ErrorCodes, invalid } from '../shared/errors.js';
import { intOption } from '../shared/options.js';

/** Options of {@link AdaptiveTimeout}. */
export interface AdaptiveTimeoutOptions {
  /** A fixed timeout in ms: when given, the timeout never adapts. */
  fixedMs?: number;
  /** The shortest timeout, in ms (once a latency is known). @default 50 */
  minMs?: number;
  /** The longest timeout, in ms (backoff included), and the timeout until the first reply. @default 1000 */
  maxMs?: number;
  /** The timeout is this multiple of the recent high percentile of latencies. @default 3 */
  multiplier?: number;
  /** Which percentile of the recent latencies sets the timeout (0..1). @default 0.999 */
  percentile?: number;
  /** How many recent latencies are kept. @default 1000 */
  sampleSize?: number;
}

/** Latencies recorded between two recomputations of the percentile (sorting is not free). */
const RECOMPUTE_EVERY = 16;

/**
 * A call timeout that follows observed latency: `multiplier` x the recent `percentile` of
 * replies (late replies included: they are the latency the store really has), kept between
 * `minMs` and `maxMs`. Each wave of timed-out calls doubles it (up to `maxMs`) until a reply
 * arrives in time, as TCP backs off its retransmission timeout: one stall of the store then costs a few
 * timeouts, not one per `minMs`. Until the first reply the timeout is `maxMs`, as TCP's initial
 * retransmission timeout is long (RFC 6298): a cold start (connecting, loading the scripts) is no
 * latency to judge the store by, and a floor guessed before any reply failed a new server's
 * first calls. Pure bookkeeping, no clock: callers measure the latencies.
 */
export class AdaptiveTimeout {
  readonly #fixed: number | undefined;
  readonly #min: number;
  readonly #max: number;
  readonly #multiplier: number;
  readonly #percentile: number;
  readonly #samples: Float64Array;
  #filled = 0;
  #next = 0;
  #sinceRecompute = 0;
  #base: number;
  #backoff = 1;

  constructor(options: AdaptiveTimeoutOptions = {}) {
    const fixed = options.fixedMs;
    if (fixed !== undefined && (!Number.isInteger(fixed) || fixed < 1)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'fixedMs', 'must be an integer >= 1');
    }
    this.#fixed = fixed;
    this.#min = intOption(options.minMs, 'minMs', 50, 1, 600_000);
    this.#max = intOption(options.maxMs, 'maxMs', 1000, 1, 600_000);
    if (this.#max < this.#min) throw invalid(ErrorCodes.INVALID_OPTIONS, 'maxMs', 'must be >= minMs');
    this.#multiplier = options.multiplier ?? 3;
    if (!(this.#multiplier >= 1 && this.#multiplier <= 100)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'multiplier', 'must be between 1 and 100');
    }
    this.#percentile = options.percentile ?? 0.999;
    if (!(this.#percentile > 0 && this.#percentile <= 1)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'percentile', 'must be in (0, 1]');
    }
    const size = options.sampleSize ?? 1000;
    if (!Number.isInteger(size) || size < 1 || size > 100_000) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'sampleSize', 'must be an integer between 1 and 100000');
    }
    this.#samples = new Float64Array(size);
    this.#base = this.#max;
  }

  /** True when the timeout follows latency (no fixed timeout was given). */
  get adaptive(): boolean {
    return this.#fixed === undefined;
  }

  /** The timeout to give the next call, in ms. */
  get currentMs(): number {
    if (this.#fixed !== undefined) return this.#fixed;
    return Math.min(this.#max, this.#base * this.#backoff);
  }

  /** A reply arrived `latencyMs` after its call was sent; `late` when its call had already timed out. */
  observe(latencyMs: number, late = false): void {
    if (!late) this.#backoff = 1;
    if (this.#fixed !== undefined || !Number.isFinite(latencyMs) || latencyMs < 0) return;
    this.#samples[this.#next] = latencyMs;
    this.#next = (this.#next + 1) % this.#samples.length;
    if (this.#filled < this.#samples.length) this.#filled++;
    // A latency above what the timeout allows for is acted on at once; lower ones can wait.
    // The first reply replaces the initial guess at once.
    const first = this.#filled === 1;
    if (first || ++this.#sinceRecompute >= RECOMPUTE_EVERY || latencyMs * this.#multiplier > this.#base) this.#recompute();
  }

  /**
   * A call given `budgetMs` got no reply in time: the next calls wait twice as long. Calls that
   * were given less than the current timeout timed out in an earlier wave, already counted: a
   * stall that fails a hundred calls at once doubles the timeout once, not a hundred times.
   */
  timedOut(budgetMs: number = this.currentMs): void {
    if (this.#fixed !== undefined || budgetMs < this.currentMs) return;
    if (this.#base * this.#backoff < this.#max) this.#backoff *= 2;
  }

  #recompute(): void {
    this.#sinceRecompute = 0;
    const n = this.#filled;
    const high = n === 0 ? 0 : ranked(this.#samples, n, Math.max(0, Math.min(n - 1, Math.ceil(this.#percentile * n) - 1)));
    this.#base = Math.min(this.#max, Math.max(this.#min, Math.ceil(high * this.#multiplier)));
  }
}

/** Above this many values from the top, {@link ranked} sorts instead of scanning. */
const SCAN_TOP = 32;

/**
 * The value at index `at` of the first `n` samples in ascending order. A high percentile sits a
 * few values from the top (p99.9 of 1,000: the second largest), found in one pass over the
 * samples instead of a sort: sorting 1,000 latencies every 16 replies cost a lone caller as much
 * CPU as the rest of its decision.
 */
export function ranked(samples: Float64Array, n: number, at: number): number {
  const k = n - at;
  if (k > SCAN_TOP) return samples.slice(0, n).sort()[at]!;
  // The k largest values seen so far, ascending: top[0] is the answer at the end.
  const top: number[] = [];
  for (let i = 0; i < n; i++) {
    const v = samples[i]!;
    if (top.length === k) {
      if (v <= top[0]!) continue;
      top.shift();
    }
    let j = top.length;
    while (j > 0 && top[j - 1]! > v) j--;
    top.splice(j, 0, v);
  }
  return top[0]!;
}
