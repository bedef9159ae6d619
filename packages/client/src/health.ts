import {
  ErrorCodes,
  FailureStreak,
  SluiceError,
  type Clock,
  type LimiterObserver,
  type Logger,
  type TimerHandle,
} from '@sluice/core';

/** Options of {@link Health}. */
export interface HealthOptions {
  readonly clock: Clock;
  /** Resolves when the service is ready again (`GET /readyz` answered 200). */
  readonly probe: () => Promise<void>;
  readonly probeIntervalMs: number;
  readonly maxProbeIntervalMs: number;
  readonly url: string;
  /** Timed-out calls in a row (calls in flight together count once) that mark it down. */
  readonly consecutiveFailures: number;
  readonly logger?: Logger;
  readonly observer?: LimiterObserver;
  /** Called once the service is back. */
  readonly onRecovered?: () => void;
}

/**
 * Whether the service answers. Marked down at once when it cannot be reached, or after
 * `consecutiveFailures` timed-out calls in a row (one slow answer under load is not an
 * outage); then probed in the background with backoff (50 -> 500 ms by default) until ready. Switches are logged and reported to
 * the observer (`storeSwitched`), as the core limiter does for its store.
 */
export class Health {
  #up = true;
  #timer: TimerHandle | undefined;
  #probe: Promise<void> | undefined;
  #closed = false;
  readonly #streak: FailureStreak;

  constructor(private readonly o: HealthOptions) {
    this.#streak = new FailureStreak(o.consecutiveFailures);
  }

  /** Call before a call to the service; pass the ticket to {@link failed}. */
  begin(): number {
    return this.#streak.begin();
  }

  /** A call was answered: a streak of timeouts is over. */
  succeeded(): void {
    this.#streak.succeeded();
  }

  /** A call failed with a service-unavailable error: counts a timeout, marks down on the rest. */
  failed(err: unknown, ticket: number): void {
    const timeout = err instanceof SluiceError && err.code === ErrorCodes.STORE_TIMEOUT;
    if (!timeout || this.#streak.failed(ticket)) this.markDown(err);
  }

  /** False while the service is considered unavailable. */
  get up(): boolean {
    return this.#up;
  }

  markDown(err: unknown): void {
    if (!this.#up || this.#closed) return;
    this.#up = false;
    this.#streak.reset();
    this.o.logger?.warn({ err, service: this.o.url }, 'sluice service unavailable: deciding by store-failure policy');
    this.o.observer?.storeSwitched?.({ healthy: false });
    this.#schedule(this.o.probeIntervalMs);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) this.o.clock.clearTimer(this.#timer);
    this.#timer = undefined;
    await this.#probe;
  }

  #schedule(delay: number): void {
    if (this.#closed) return;
    this.#timer = this.o.clock.setTimer(
      () => {
        this.#timer = undefined;
        this.#probe = this.#run(delay).finally(() => (this.#probe = undefined));
      },
      delay,
      true,
    );
  }

  async #run(delay: number): Promise<void> {
    try {
      await this.o.probe();
    } catch {
      this.#schedule(Math.min(this.o.maxProbeIntervalMs, delay * 2));
      return;
    }
    if (this.#closed) return;
    this.#up = true;
    this.#streak.reset();
    this.o.logger?.info({ service: this.o.url }, 'sluice service is back: global decisions resumed');
    this.o.observer?.storeSwitched?.({ healthy: true });
    this.o.onRecovered?.();
  }
}
