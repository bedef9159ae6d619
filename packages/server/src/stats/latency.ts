/**
 * The p99 of decision latency over a recent window, for the `health` of `GET /v1/stats`: the
 * decision-duration histogram's bucket counts are read once a second into a ring, and the
 * quantile is interpolated from the difference between now and the oldest reading of the window,
 * as PromQL's `histogram_quantile` does over `rate(...[1m])`. Deciding costs nothing more for it.
 */

/**
 * The `q` quantile (0 < q <= 1) of a histogram, interpolated linearly inside the bucket the rank
 * falls in (the first bucket starts at 0), as Prometheus' `histogram_quantile` does: a rank in the
 * `+Inf` bucket is answered with the highest finite bound. `counts` holds one count per bucket
 * (not cumulative), `bounds.length + 1` of them. Undefined when the histogram is empty.
 */
export function histogramQuantile(q: number, bounds: readonly number[], counts: ArrayLike<number>): number | undefined {
  if (!(q > 0 && q <= 1)) throw new RangeError(`the quantile must be in (0, 1], got ${q}`);
  if (counts.length !== bounds.length + 1) {
    throw new RangeError(`a histogram of ${bounds.length} bounds has ${bounds.length + 1} buckets, got ${counts.length} counts`);
  }
  let total = 0;
  for (let i = 0; i < counts.length; i++) total += counts[i]!;
  if (total <= 0) return undefined;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < bounds.length; i++) {
    const inBucket = counts[i]!;
    if (below + inBucket >= rank && inBucket > 0) {
      const lower = i === 0 ? 0 : bounds[i - 1]!;
      return lower + (bounds[i]! - lower) * ((rank - below) / inBucket);
    }
    below += inBucket;
  }
  return bounds[bounds.length - 1];
}

/** A histogram whose bucket counts, every series added up, can be read (`SeriesHistogram`). */
export interface BucketSource {
  /** Upper bounds, ascending. */
  readonly bounds: readonly number[];
  /** Writes the counts per bucket (not cumulative, `bounds.length + 1`) into `into`. */
  bucketTotals(into: Float64Array): Float64Array;
}

/** Options of a {@link LatencyWindow}. */
export interface LatencyWindowOptions {
  /** How far back the quantile looks, in ms. @default 60000 */
  readonly windowMs?: number;
  /** How often the counts are read into the ring, in ms. @default 1000 */
  readonly sampleMs?: number;
  /** A monotonic clock in ms. @default performance.now */
  readonly now?: () => number;
}

/** What {@link LatencyWindow.p99} answers. */
export interface WindowedP99 {
  /** The window the figure is over, in seconds. */
  readonly windowSeconds: number;
  /** The p99 in seconds; absent when no decision was timed in the window. */
  readonly p99Seconds?: number;
}

/**
 * The p99 of a histogram over its last `windowMs`. {@link sample} (each `sampleMs` once
 * {@link start}ed) copies the bucket counts into a ring of `windowMs / sampleMs + 1` readings;
 * {@link p99} reads the counts now and subtracts the oldest reading still inside the window. A
 * count that went down (a registry reset) counts as zero, never as negative.
 */
export class LatencyWindow {
  readonly windowMs: number;
  readonly sampleMs: number;
  readonly #source: BucketSource;
  readonly #now: () => number;
  readonly #at: Float64Array;
  readonly #counts: Float64Array[];
  /** Readings in the ring, and where the next goes. */
  #size = 0;
  #next = 0;
  readonly #scratch: Float64Array;
  #timer: NodeJS.Timeout | undefined;

  constructor(source: BucketSource, options: LatencyWindowOptions = {}) {
    this.windowMs = options.windowMs ?? 60_000;
    this.sampleMs = options.sampleMs ?? 1000;
    if (!(this.windowMs > 0 && this.sampleMs > 0 && this.sampleMs <= this.windowMs)) {
      throw new RangeError(
        `the window (${this.windowMs} ms) and its sampling (${this.sampleMs} ms) must be positive, sampling within the window`,
      );
    }
    this.#source = source;
    this.#now = options.now ?? (() => performance.now());
    const slots = Math.ceil(this.windowMs / this.sampleMs) + 1;
    const buckets = source.bounds.length + 1;
    this.#at = new Float64Array(slots);
    this.#counts = Array.from({ length: slots }, () => new Float64Array(buckets));
    this.#scratch = new Float64Array(buckets);
    this.sample();
  }

  /** Reads the counts now into the ring (the oldest reading makes room). */
  sample(): void {
    this.#source.bucketTotals(this.#counts[this.#next]!);
    this.#at[this.#next] = this.#now();
    this.#next = (this.#next + 1) % this.#at.length;
    this.#size = Math.min(this.#size + 1, this.#at.length);
  }

  /** The p99 of what was observed since the oldest reading inside the window. */
  p99(): WindowedP99 {
    const windowSeconds = this.windowMs / 1000;
    const now = this.#now();
    const base = this.#baseline(now - this.windowMs);
    const diff = this.#source.bucketTotals(this.#scratch);
    for (let i = 0; i < diff.length; i++) diff[i] = Math.max(0, diff[i]! - base[i]!);
    const p99 = histogramQuantile(0.99, this.#source.bounds, diff);
    return p99 === undefined ? { windowSeconds } : { windowSeconds, p99Seconds: p99 };
  }

  /**
   * The oldest reading taken at or after `since`; the newest when none is (the timer was held
   * up longer than the window: the figure then covers a little more than it).
   */
  #baseline(since: number): Float64Array {
    const slots = this.#at.length;
    for (let k = this.#size; k >= 1; k--) {
      const i = (this.#next - k + slots) % slots;
      if (this.#at[i]! >= since) return this.#counts[i]!;
    }
    return this.#counts[(this.#next - 1 + slots) % slots]!;
  }

  /** Reads the counts every `sampleMs` until {@link close} (the timer holds no process open). */
  start(): this {
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.sample(), this.sampleMs);
      this.#timer.unref();
    }
    return this;
  }

  /** Stops the readings. */
  close(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
