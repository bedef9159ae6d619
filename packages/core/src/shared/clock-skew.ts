import { systemClock, type Clock, type TimerHandle } from './clock.js';
import { ErrorCodes, invalid } from './errors.js';
import { Degradation, secondsText } from './degradation.js';
import { resolveLogger, type Logger } from './log.js';
import { intOption } from './options.js';

/**
 * Clock skew between this process and the store. Decisions never need it (the store decides on
 * its own clock), but ages that cross processes do: a time stamped by one process and compared
 * with the wall clock of another. Each process measures its offset to the store's clock and
 * converts its wall clock to store time by it (see {@link storeClock}), so two processes
 * compare times on one clock instead of assuming their clocks agree.
 */

/** What a time source answers: the store's clock, epoch milliseconds. */
export interface StoreTimeReading {
  /** The store's clock when it answered, epoch ms. */
  readonly timeMs: number;
  /**
   * How far `timeMs` may be from the store's clock by the source's own account, in ms: 0 for
   * the store itself, the service's own uncertainty for a service relaying its estimate.
   * @default 0
   */
  readonly uncertaintyMs?: number;
}

/** Reads the store's clock once (e.g. Redis `TIME`). It must settle within a bounded time. */
export type TimeSource = () => Promise<StoreTimeReading>;

/** One reading of the store's clock, as the monitor took it. */
export interface ClockSample {
  /** Local wall clock (epoch ms) when the reading was asked for. */
  readonly sentAt: number;
  /** The round trip of the reading, in ms (measured on the monotonic clock). */
  readonly rttMs: number;
  /** What the source answered. */
  readonly reading: StoreTimeReading;
}

/** The measured offset: what an age check adds to its wall clock to read store time. */
export interface ClockOffset {
  /** Store clock minus local wall clock, in ms; 0 until measured. */
  readonly offsetMs: number;
}

/** The best estimate so far. */
export interface ClockSkewEstimate extends ClockOffset {
  /** False until a reading was answered: `offsetMs` is then 0 (the wall clock is used as it is). */
  readonly measured: boolean;
  /** The store's clock is within `offsetMs ± uncertaintyMs` of the local clock (half the round trip plus the source's own). */
  readonly uncertaintyMs: number;
  /** Round trip of the reading the estimate comes from, in ms. */
  readonly rttMs: number;
}

const UNMEASURED: ClockSkewEstimate = Object.freeze({ measured: false, offsetMs: 0, uncertaintyMs: 0, rttMs: 0 });

/**
 * Estimates the offset NTP's way: each reading gives `storeTime - (sentAt + rtt / 2)`, true
 * within `rtt / 2`, and of the last `window` readings the one with the smallest uncertainty
 * wins, so a reading delayed by a busy event loop or a queue does not move the estimate. A
 * reading whose range does not overlap the estimate's (a clock was stepped) replaces the older
 * readings at once. Pure: no clock, no I/O.
 */
export class SkewEstimator {
  readonly #window: number;
  #samples: ClockSkewEstimate[] = [];
  #best: ClockSkewEstimate = UNMEASURED;

  /** @param window how many recent readings are kept (1..64). */
  constructor(window = 8) {
    this.#window = intOption(window, 'window', undefined, 1, 64);
  }

  /** The estimate (not `measured` before the first reading). */
  get estimate(): ClockSkewEstimate {
    return this.#best;
  }

  /**
   * Adds one reading; returns the new estimate. A reading that cannot be true (a negative round
   * trip, a time that is not a finite number) is refused with `SLUICE_ERR_INVALID_OPTIONS`.
   */
  add(sample: ClockSample): ClockSkewEstimate {
    const { sentAt, rttMs, reading } = sample;
    const own = reading.uncertaintyMs ?? 0;
    if (!Number.isFinite(reading.timeMs) || !Number.isFinite(sentAt)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'timeMs', 'the store time must be a finite number of ms');
    }
    if (!(rttMs >= 0 && rttMs < 3_600_000)) throw invalid(ErrorCodes.INVALID_OPTIONS, 'rttMs', 'must be in 0..3600000');
    if (!(own >= 0 && own < 3_600_000)) throw invalid(ErrorCodes.INVALID_OPTIONS, 'uncertaintyMs', 'must be in 0..3600000');
    const estimate: ClockSkewEstimate = Object.freeze({
      measured: true,
      offsetMs: reading.timeMs - (sentAt + rttMs / 2),
      uncertaintyMs: rttMs / 2 + own,
      rttMs,
    });
    const prior = this.#best;
    // Two readings that cannot both be true (their ranges do not overlap): a clock was stepped
    // in between. The older readings describe a clock that is gone; start again from this one.
    if (prior.measured && Math.abs(estimate.offsetMs - prior.offsetMs) > estimate.uncertaintyMs + prior.uncertaintyMs) {
      this.#samples = [];
    }
    this.#samples.push(estimate);
    if (this.#samples.length > this.#window) this.#samples.shift();
    let best = this.#samples[0]!;
    // Ties go to the newest: the clocks may have drifted since.
    for (const s of this.#samples) if (s.uncertaintyMs <= best.uncertaintyMs) best = s;
    this.#best = best;
    return best;
  }
}

/**
 * Whether the skew is over `thresholdMs`, only changing when the estimate is sure of it: over
 * once `|offset| - uncertainty > threshold`, back within once `|offset| + uncertainty <=
 * threshold`, otherwise as it was. A noisy estimate near the threshold does not flap.
 */
export function skewExceeds(previous: boolean, estimate: ClockSkewEstimate, thresholdMs: number): boolean {
  if (!estimate.measured) return previous;
  const size = Math.abs(estimate.offsetMs);
  if (size - estimate.uncertaintyMs > thresholdMs) return true;
  if (size + estimate.uncertaintyMs <= thresholdMs) return false;
  return previous;
}

/**
 * A wall clock turned into the store's clock by a measured offset: `wallClock() + offsetMs`,
 * the offset read at each call (it moves as the monitor measures). Without an offset, the wall
 * clock itself.
 */
export function storeClock(wallClock: () => number, offset: ClockOffset | undefined): () => number {
  if (offset === undefined) return wallClock;
  return () => wallClock() + offset.offsetMs;
}

/**
 * Reads a `clockSkew` option: undefined, or an object with a numeric `offsetMs` (a
 * {@link ClockSkewMonitor}); otherwise `SLUICE_ERR_INVALID_OPTIONS` naming `field`.
 */
export function clockOffsetOption(value: unknown, field: string): ClockOffset | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || typeof (value as ClockOffset).offsetMs !== 'number') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, field, 'must have a numeric offsetMs (a ClockSkewMonitor)');
  }
  return value as ClockOffset;
}

/** Hooks a {@link ClockSkewMonitor} calls; metrics adapters implement them. Cheap, never throwing. */
export interface ClockSkewObserver {
  /** Every answered reading, with the estimate after it. */
  sampled?(estimate: ClockSkewEstimate): void;
  /** The skew went over the threshold (`over: true`) or back within it. */
  thresholdCrossed?(event: { over: boolean; estimate: ClockSkewEstimate }): void;
  /** A reading failed (the store did not answer, or answered nonsense). */
  failed?(error: unknown): void;
}

/** Options of {@link ClockSkewMonitor}. */
export interface ClockSkewMonitorOptions {
  /** Reads the store's clock (e.g. `redisTimeSource` of `@sluice/redis`). */
  source: TimeSource;
  /** What the logs call the store, e.g. `redis`. @default 'store' */
  name?: string;
  /** How often the store's clock is read, in ms (100..3600000). @default 30000 */
  intervalMs?: number;
  /**
   * A skew larger than this (in ms, 1..3600000) is warned about once, and again once it is back
   * within. @default 1000: half of the gateway's default 2000 ms tolerance on decision ages, so
   * the warning comes before a skew can make that check wrong
   */
  thresholdMs?: number;
  /** How many recent readings the estimate chooses from (1..64). @default 8 */
  window?: number;
  /** The local wall clock, epoch ms. Injected in tests. @default Date.now */
  wallClock?: () => number;
  /** Round trips and the reading timer. @default systemClock */
  clock?: Clock;
  /** Where crossings are logged; `false` for nowhere. @default JSON lines on stderr */
  logger?: Logger | false;
  /** Metrics hooks (e.g. `createClockSkewObserver` of `@sluice/core/metrics`). */
  observer?: ClockSkewObserver;
}

/** {@link ClockSkewMonitorOptions}, validated and with defaults filled. */
export interface CompiledClockSkewMonitorOptions {
  readonly source: TimeSource;
  readonly name: string;
  readonly intervalMs: number;
  readonly thresholdMs: number;
  readonly window: number;
  readonly wallClock: () => number;
  readonly clock: Clock;
  readonly logger: Logger | undefined;
  readonly observer: ClockSkewObserver | undefined;
}

/** Validates the options (`SLUICE_ERR_INVALID_OPTIONS` naming the field) and fills defaults. */
export function compileClockSkewMonitorOptions(o: ClockSkewMonitorOptions): CompiledClockSkewMonitorOptions {
  if (typeof o !== 'object' || o === null) throw invalid(ErrorCodes.INVALID_OPTIONS, 'options', 'must be an object');
  if (typeof o.source !== 'function') throw invalid(ErrorCodes.INVALID_OPTIONS, 'source', 'must be a function');
  if (o.wallClock !== undefined && typeof o.wallClock !== 'function') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'wallClock', 'must be a function');
  }
  const name = o.name ?? 'store';
  if (typeof name !== 'string' || name.length < 1 || name.length > 64) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'name', 'must be 1..64 characters');
  }
  return Object.freeze({
    source: o.source,
    name,
    intervalMs: intOption(o.intervalMs, 'intervalMs', 30_000, 100, 3_600_000),
    thresholdMs: intOption(o.thresholdMs, 'thresholdMs', 1000, 1, 3_600_000),
    window: intOption(o.window, 'window', 8, 1, 64),
    wallClock: o.wallClock ?? Date.now,
    clock: o.clock ?? systemClock,
    logger: resolveLogger(o.logger),
    observer: o.observer,
  });
}

/** What a monitor knows, for stats pages and `sluice status`. */
export interface ClockSkewStatus extends ClockSkewEstimate {
  /** True while the skew is known to exceed the threshold. */
  readonly skewed: boolean;
  readonly thresholdMs: number;
  /** Readings answered and failed since start. */
  readonly samples: number;
  readonly failures: number;
  /** Times the skew went over the threshold. */
  readonly warnings: number;
  /** Local wall clock of the last answered reading (epoch ms); 0 before the first. */
  readonly lastSampleAt: number;
}

/**
 * Reads the store's clock every `intervalMs` (first at {@link start}), estimates this process's
 * offset to it ({@link SkewEstimator}), and warns once when the skew exceeds `thresholdMs`
 * (and once when it is back within, see {@link skewExceeds}). Pure observation: it changes
 * nothing unless its offset is given to an age check (as `clockSkew`), which then reads
 * {@link now} instead of the wall clock. A reading that fails keeps the last estimate (clocks
 * drift by milliseconds per hour, not per minute). The timer does not keep the process alive;
 * {@link close} stops it.
 *
 * @example
 * const skew = new ClockSkewMonitor({ source: redisTimeSource(store) });
 * skew.start();
 * const cache = new DecisionCache({ clockSkew: skew });
 * // ... on shutdown
 * await skew.close();
 */
export class ClockSkewMonitor implements ClockOffset {
  /** The compiled options, for inspection. */
  readonly options: CompiledClockSkewMonitorOptions;
  readonly #estimator: SkewEstimator;
  #skewed = false;
  #samples = 0;
  #failures = 0;
  #warnings = 0;
  #lastSampleAt = 0;
  #timer: TimerHandle | undefined;
  #reading: Promise<ClockSkewEstimate> | undefined;
  #started = false;
  #closed = false;
  /** Readings failing in a row: one line when it starts, one when a reading is answered again. */
  readonly #failing: Degradation;

  constructor(options: ClockSkewMonitorOptions) {
    this.options = compileClockSkewMonitorOptions(options);
    this.#estimator = new SkewEstimator(this.options.window);
    this.#failing = new Degradation({
      logger: this.options.logger,
      clock: this.options.clock,
      event: 'clock_unreadable',
      // Readings are minutes apart at most: a summary per reading would be a line per failure.
      summaryIntervalMs: 0,
    });
  }

  /** Store clock minus local wall clock, in ms (0 until measured). */
  get offsetMs(): number {
    return this.#estimator.estimate.offsetMs;
  }

  /** How far the offset may be off, in ms (0 until measured). */
  get uncertaintyMs(): number {
    return this.#estimator.estimate.uncertaintyMs;
  }

  /** The current estimate. */
  get estimate(): ClockSkewEstimate {
    return this.#estimator.estimate;
  }

  /** The store's clock as this process estimates it: the wall clock plus the offset, epoch ms. */
  readonly now = (): number => this.options.wallClock() + this.#estimator.estimate.offsetMs;

  /** The estimate with the threshold state and counters. */
  status(): ClockSkewStatus {
    return {
      ...this.#estimator.estimate,
      skewed: this.#skewed,
      thresholdMs: this.options.thresholdMs,
      samples: this.#samples,
      failures: this.#failures,
      warnings: this.#warnings,
      lastSampleAt: this.#lastSampleAt,
    };
  }

  /** Takes the first reading now and one every `intervalMs` after it. Idempotent. */
  start(): void {
    if (this.#started || this.#closed) return;
    this.#started = true;
    void this.#tick();
  }

  /**
   * Takes one reading now (joining one in flight) and resolves with the estimate after it. Never
   * rejects: a failed reading is counted and reported to the observer.
   */
  sample(): Promise<ClockSkewEstimate> {
    if (this.#closed) return Promise.resolve(this.#estimator.estimate);
    this.#reading ??= this.#read().finally(() => {
      this.#reading = undefined;
    });
    return this.#reading;
  }

  /** Stops the readings and waits for one in flight. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) this.options.clock.clearTimer(this.#timer);
    this.#timer = undefined;
    await this.#reading;
    this.#failing.close();
  }

  async #tick(): Promise<void> {
    this.#timer = undefined;
    await this.sample();
    if (this.#closed) return;
    this.#timer = this.options.clock.setTimer(() => void this.#tick(), this.options.intervalMs, true);
  }

  async #read(): Promise<ClockSkewEstimate> {
    const { source, clock, wallClock } = this.options;
    const sentAt = wallClock();
    const started = clock.now();
    let estimate: ClockSkewEstimate;
    try {
      const reading = await source();
      estimate = this.#estimator.add({ sentAt, rttMs: clock.now() - started, reading });
    } catch (error) {
      this.#failures++;
      this.options.observer?.failed?.(error);
      const { name } = this.options;
      this.#failing.fail(error, (reason) => {
        const prior = this.#estimator.estimate;
        return {
          msg: `clock of ${name} not read (${reason}): ${prior.measured ? `age checks keep the last measured offset (${Math.round(prior.offsetMs)} ms)` : "age checks use this host's clock as it is"} until it answers`,
          fields: { store: name },
        };
      });
      return this.#estimator.estimate;
    }
    this.#failing.recover((spell) => ({
      msg: `clock of ${this.options.name} read again after ${secondsText(spell.lastedMs)} (${spell.repeats + 1} readings failed)`,
      fields: { store: this.options.name },
    }));
    this.#samples++;
    this.#lastSampleAt = sentAt;
    this.options.observer?.sampled?.(estimate);
    const over = skewExceeds(this.#skewed, estimate, this.options.thresholdMs);
    if (over !== this.#skewed) this.#cross(over, estimate);
    return estimate;
  }

  #cross(over: boolean, estimate: ClockSkewEstimate): void {
    this.#skewed = over;
    if (over) this.#warnings++;
    this.options.observer?.thresholdCrossed?.({ over, estimate });
    const fields = {
      store: this.options.name,
      offsetMs: Math.round(estimate.offsetMs),
      uncertaintyMs: Math.ceil(estimate.uncertaintyMs),
      thresholdMs: this.options.thresholdMs,
    };
    if (over) {
      this.options.logger?.warn(
        fields,
        "this host's clock differs from the store's by more than the threshold: age checks given the measured skew correct for it, others compare wrong times",
      );
    } else {
      this.options.logger?.info(fields, "this host's clock is back within the threshold of the store's");
    }
  }
}
