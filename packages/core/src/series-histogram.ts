/**
 * A Prometheus histogram for hot paths: its series are resolved once and observed with a bucket
 * search and three additions, where prom-client's `Histogram.observe` validates and hashes the
 * labels on every call (about thirty times the cost, measured in docs/metrics.md, "Cost"). It
 * registers on a prom-client registry like any metric and is exposed in the same text format.
 */
import type { Metric, Registry } from 'prom-client';

/** One series (one set of label values) of a {@link SeriesHistogram}. */
export interface HistogramSeries {
  /** Counts one value (seconds, for a duration). */
  observe(value: number): void;
}

/** What a {@link SeriesHistogram} is made of; `name` is the full name. */
export interface SeriesHistogramConfiguration<T extends string> {
  name: string;
  help: string;
  labelNames?: readonly T[];
  /** Upper bounds, ascending; `+Inf` is added. */
  buckets: readonly number[];
  registers: readonly Registry[];
}

/** A value of the exposition, as prom-client's registry reads it from `get()`. */
interface ExportedValue {
  value: number;
  labels: Record<string, string | number>;
  metricName: string;
}

class Series implements HistogramSeries {
  /** Per bucket (not cumulative), the last one past every bound (`+Inf`). */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    readonly labels: Readonly<Record<string, string>>,
    readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    const b = this.bounds;
    let i = 0;
    while (i < b.length && value > b[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

/**
 * A histogram whose callers hold their series ({@link series}) instead of naming labels on each
 * observation. Series live as long as the histogram (a registry reset zeroes them): label values
 * must come from a bounded set, as for any metric.
 */
export class SeriesHistogram<T extends string = string> {
  readonly name: string;
  readonly help: string;
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly labelNames: readonly T[];
  readonly #bounds: readonly number[];
  readonly #series = new Map<string, Series>();

  constructor(config: SeriesHistogramConfiguration<T>) {
    const bounds = [...config.buckets];
    if (bounds.length === 0 || bounds.some((b, i) => !Number.isFinite(b) || (i > 0 && b <= bounds[i - 1]!))) {
      throw new TypeError(`${config.name}: buckets must be finite numbers in ascending order`);
    }
    const labelNames = [...(config.labelNames ?? [])];
    for (const l of labelNames) {
      if (!/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(l) || l.startsWith('__') || l === 'le') {
        throw new TypeError(`${config.name}: invalid label name ${JSON.stringify(l)}`);
      }
    }
    this.name = config.name;
    this.help = config.help;
    this.labelNames = Object.freeze(labelNames);
    this.#bounds = Object.freeze(bounds);
    // prom-client's registry reads a metric through `name`, `help`, `type`, `get()` and `reset()`.
    for (const r of config.registers) r.registerMetric(this as unknown as Metric);
  }

  /** The series of these label values (made on first use); keep it to observe cheaply. */
  series(labels: Readonly<Record<T, string>>): HistogramSeries {
    let key = '';
    for (const l of this.labelNames) {
      const v = labels[l];
      if (typeof v !== 'string') throw new TypeError(`${this.name}: label ${l} must be a string, got ${typeof v}`);
      key += `${v.length}:${v}`;
    }
    let s = this.#series.get(key);
    if (s === undefined) {
      const own: Record<string, string> = {};
      for (const l of this.labelNames) own[l] = labels[l];
      if (Object.keys(labels).length !== this.labelNames.length) {
        throw new TypeError(`${this.name}: labels must be exactly ${this.labelNames.join(', ')}`);
      }
      s = new Series(Object.freeze(own), this.#bounds);
      this.#series.set(key, s);
    }
    return s;
  }

  /** Counts one value in the series of `labels` (looks the series up: hot paths keep theirs). */
  observe(labels: Readonly<Record<T, string>>, value: number): void {
    this.series(labels).observe(value);
  }

  /** The upper bounds of the buckets, ascending (`+Inf` is the bucket after the last). */
  get bounds(): readonly number[] {
    return this.#bounds;
  }

  /**
   * Every series' counts added up, per bucket (not cumulative; the last is past every bound),
   * written into `into` when given (of `bounds.length + 1` numbers). Read on a timer or on
   * request by whoever wants a quantile over a window: observing costs nothing more for it.
   */
  bucketTotals(into: Float64Array = new Float64Array(this.#bounds.length + 1)): Float64Array {
    if (into.length !== this.#bounds.length + 1) {
      throw new RangeError(`${this.name}: bucketTotals needs ${this.#bounds.length + 1} numbers, got ${into.length}`);
    }
    into.fill(0);
    for (const s of this.#series.values()) {
      for (let i = 0; i < into.length; i++) into[i]! += s.counts[i]!;
    }
    return into;
  }

  /** Zeroes every series (handles held by callers stay valid). */
  reset(): void {
    for (const s of this.#series.values()) {
      s.counts.fill(0);
      s.sum = 0;
      s.count = 0;
    }
  }

  /** The exposition's values: cumulative buckets, `_sum` and `_count` of each series. */
  get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: ExportedValue[] }> {
    const values: ExportedValue[] = [];
    const bucket = `${this.name}_bucket`;
    for (const s of this.#series.values()) {
      let cumulative = 0;
      for (let i = 0; i <= this.#bounds.length; i++) {
        cumulative += s.counts[i]!;
        const le = i < this.#bounds.length ? this.#bounds[i]! : '+Inf';
        values.push({ value: cumulative, labels: { le, ...s.labels }, metricName: bucket });
      }
      values.push({ value: s.sum, labels: { ...s.labels }, metricName: `${this.name}_sum` });
      values.push({ value: s.count, labels: { ...s.labels }, metricName: `${this.name}_count` });
    }
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values });
  }
}
