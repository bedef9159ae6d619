/**
 * How late Temporal delivers this worker's retried attempts: the time from when an attempt was
 * due (`currentAttemptScheduledTimestampMs`) to when it started here. A booked retry is
 * scheduled that much before its slot, so it arrives in time and waits the rest inside the
 * attempt. Bounded: the newest {@link SAMPLES} delays.
 */
export class DeliveryDelay {
  static readonly SAMPLES = 64;
  readonly #samples: number[] = [];
  #next = 0;

  /**
   * @param fallbackMs the estimate until {@link MIN_SAMPLES} delays were seen
   */
  constructor(private readonly fallbackMs = 1000) {}

  /** Notes one attempt's delay (ignored when negative or absurd: clocks of two hosts). */
  record(delayMs: number): void {
    if (!(delayMs >= 0 && delayMs <= 60_000)) return;
    if (this.#samples.length < DeliveryDelay.SAMPLES) this.#samples.push(delayMs);
    else this.#samples[this.#next] = delayMs;
    this.#next = (this.#next + 1) % DeliveryDelay.SAMPLES;
  }

  /** The 90th percentile of the delays seen, or the fallback before there are enough. */
  estimate(): number {
    if (this.#samples.length < MIN_SAMPLES) return this.fallbackMs;
    const sorted = this.#samples.slice().sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.9))]!;
  }
}

/** Delays seen before the percentile replaces the fallback. */
const MIN_SAMPLES = 4;
