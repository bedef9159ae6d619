/**
 * A prom-client `Counter` for hot paths: callers keep a series ({@link SeriesCounter.series}) and
 * count into it with one addition; the counts reach the counter when a registry reads it (its
 * `collect`), so what is exposed is prom-client's own. `Counter.inc` validates and hashes the
 * labels on every call instead (about thirty times the cost, see docs/metrics.md, "Cost").
 */
import { Counter, type CounterConfiguration } from 'prom-client';

/** One series (one set of label values) of a {@link SeriesCounter}. */
export interface CounterSeries {
  /** Adds `value` (at least 0). @default 1 */
  inc(value?: number): void;
}

class Pending implements CounterSeries {
  n = 0;

  constructor(readonly labels: Readonly<Record<string, string>>) {}

  inc(value = 1): void {
    if (!(value >= 0 && value < Infinity)) throw new TypeError(`a counter only grows by a finite amount >= 0, not ${value}`);
    this.n += value;
  }
}

/** A counter whose callers hold their series; label values must come from a bounded set. */
export class SeriesCounter<T extends string = string> {
  /** The prom-client counter the counts reach at each read. */
  readonly counter: Counter<T>;
  readonly #series = new Map<string, Pending>();
  readonly #labelNames: readonly T[];
  readonly #name: string;

  constructor(config: Omit<CounterConfiguration<T>, 'collect'>) {
    const pending = this.#series;
    this.#name = config.name;
    this.#labelNames = [...(config.labelNames ?? [])];
    this.counter = new Counter<T>({
      ...config,
      collect() {
        for (const s of pending.values()) {
          if (s.n === 0) continue;
          this.inc(s.labels as Partial<Record<T, string>>, s.n);
          s.n = 0;
        }
      },
    });
  }

  /** The series of these label values (made on first use); keep it to count cheaply. */
  series(labels: Readonly<Record<T, string>>): CounterSeries {
    let key = '';
    for (const l of this.#labelNames) {
      const v = labels[l];
      if (typeof v !== 'string') throw new TypeError(`${this.#name}: label ${l} must be a string, got ${typeof v}`);
      key += `${v.length}:${v}`;
    }
    let s = this.#series.get(key);
    if (s === undefined) {
      if (Object.keys(labels).length !== this.#labelNames.length) {
        throw new TypeError(`${this.#name}: labels must be exactly ${this.#labelNames.join(', ')}`);
      }
      const own: Record<string, string> = {};
      for (const l of this.#labelNames) own[l] = labels[l];
      s = new Pending(Object.freeze(own));
      this.#series.set(key, s);
    }
    return s;
  }
}
