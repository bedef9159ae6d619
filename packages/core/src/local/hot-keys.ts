import type { Clock } from '../shared/clock.js';
import { ErrorCodes, invalid } from '../shared/errors.js';
import { compileLeaseSettings, type CompiledLeaseSettings, type LeaseSettings } from './lease-cache.js';
import { intOption } from '../shared/options.js';
import { WindowedSpaceSaving } from './space-saving.js';

/**
 * Hot-key detection on one resource: its heaviest caller keys, counted in a bounded Space-Saving
 * sketch over a sliding window (see docs/control-plane.md, "Hot keys").
 */
export interface HotKeyOptions {
  /** Counters of the sketch: the most keys tracked at once (4..1024). @default 64 */
  capacity?: number;
  /** Keys reported (`Limiter.hotKeys`, `/v1/stats`), at most `capacity`. @default 10 */
  report?: number;
  /** The sliding window calls are counted over, in ms (100..3,600,000). @default 10000 */
  windowMs?: number;
  /**
   * When a key counts as hot. Every bound given must hold; without `threshold` keys are only
   * tracked, never mitigated.
   */
  threshold?: HotKeyThreshold;
  /**
   * What is done with a hot key: `lease` serves its calls from leased batches of permits (see
   * `ResourceOptions.lease`), one store round trip per batch instead of one per call, until it
   * cools. Requires `threshold`. @default none (track only)
   */
  action?: 'lease';
  /** Lease settings for hot keys (`action: 'lease'`). @default the lease defaults */
  lease?: LeaseSettings | true;
  /** How long a mitigated key must stay below the threshold before it is let go, in ms. @default 30000 */
  coolAfterMs?: number;
}

/** When a key counts as hot (see {@link HotKeyOptions.threshold}). */
export interface HotKeyThreshold {
  /** Calls per second on the key, over the window. */
  rate?: number;
  /** Share (0..1] of the resource's calls over the window that went to the key. */
  share?: number;
}

/** Validated {@link HotKeyOptions}. */
export interface CompiledHotKeyOptions {
  readonly capacity: number;
  readonly report: number;
  readonly windowMs: number;
  /** Calls per second (0: no rate bound). */
  readonly rate: number;
  /** Share of the resource's calls (0: no share bound). */
  readonly share: number;
  readonly action: 'lease' | undefined;
  readonly lease: CompiledLeaseSettings | undefined;
  readonly coolAfterMs: number;
}

const FIELDS = ['capacity', 'report', 'windowMs', 'threshold', 'action', 'lease', 'coolAfterMs'];

/** Validates hot-key options (`true`: track with the defaults); errors name `path`. */
export function compileHotKeyOptions(options: HotKeyOptions | true, path: string): CompiledHotKeyOptions {
  const o = options === true ? {} : options;
  if (typeof o !== 'object' || o === null || Array.isArray(o)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, path, 'must be true or an object');
  }
  for (const k of Object.keys(o)) {
    if (!FIELDS.includes(k)) throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.${k}`, 'unknown field');
  }
  const capacity = intOption(o.capacity, `${path}.capacity`, 64, 4, 1024);
  const report = intOption(o.report, `${path}.report`, Math.min(10, capacity), 1, capacity);
  const windowMs = intOption(o.windowMs, `${path}.windowMs`, 10_000, 100, 3_600_000);
  const coolAfterMs = intOption(o.coolAfterMs, `${path}.coolAfterMs`, 30_000, 0, 3_600_000);
  const t = o.threshold;
  let rate = 0;
  let share = 0;
  if (t !== undefined) {
    if (typeof t !== 'object' || t === null) throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.threshold`, 'must be an object');
    for (const k of Object.keys(t)) {
      if (k !== 'rate' && k !== 'share') throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.threshold.${k}`, 'unknown field');
    }
    if (t.rate === undefined && t.share === undefined) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.threshold`, 'give rate, share or both');
    }
    if (t.rate !== undefined && (typeof t.rate !== 'number' || !(t.rate > 0 && t.rate <= 1e9))) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.threshold.rate`, 'must be a number of calls per second in (0, 1e9]');
    }
    if (t.share !== undefined && (typeof t.share !== 'number' || !(t.share > 0 && t.share <= 1))) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.threshold.share`, 'must be a number in (0, 1]');
    }
    rate = t.rate ?? 0;
    share = t.share ?? 0;
  }
  if (o.action !== undefined && o.action !== 'lease') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.action`, "must be 'lease'");
  }
  if (o.action !== undefined && t === undefined) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.action`, 'needs a threshold');
  }
  if (o.lease !== undefined && o.action !== 'lease') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.lease`, "only with action 'lease'");
  }
  const lease = o.action === 'lease' ? compileLeaseSettings(o.lease ?? true, `${path}.lease`) : undefined;
  return Object.freeze({ capacity, report, windowMs, rate, share, action: o.action, lease, coolAfterMs });
}

/** One of a resource's heaviest keys, as {@link HotKeys.report} gives it. */
export interface HotKey {
  readonly key: string;
  /** Calls over the window (an upper bound: Space-Saving over-estimates by at most `error`). */
  readonly calls: number;
  /** How much of `calls` the key may have inherited from keys it displaced. */
  readonly error: number;
  /** Calls per second over the window (from `calls`). */
  readonly rate: number;
  /** Share of the resource's calls over the window (from `calls`). */
  readonly share: number;
  /** What is being done with the key: `lease`, or undefined when nothing. */
  readonly mitigation: 'lease' | undefined;
}

/** A resource's hot keys: its heaviest keys and those mitigated now. */
export interface HotKeyReport {
  readonly resource: string;
  readonly windowMs: number;
  /** Calls over the window, every key. */
  readonly calls: number;
  /** The heaviest keys, heaviest first (at most `report`). */
  readonly keys: readonly HotKey[];
  /** Keys mitigated now. */
  readonly mitigated: number;
}

/** A key starting or ending its mitigation (see `LimiterObserver.hotKey`). */
export interface HotKeyChange {
  readonly key: string;
  readonly mitigation: 'lease';
  readonly active: boolean;
}

/**
 * The hot keys of one resource: records each call, decides whether its key is mitigated, and
 * reports the heaviest. A key is mitigated while it passes the threshold, judged on the lower
 * bound of its count (a key never counts as hot on what it inherited), and let go once it has
 * stayed below for `coolAfterMs`. At most `capacity` keys are mitigated at once: only keys the
 * sketch holds can pass, and the coolest are let go first when that many are.
 */
export class HotKeys {
  readonly #resource: string;
  #options: CompiledHotKeyOptions;
  readonly #sketch: WindowedSpaceSaving;
  /** Mitigated keys and when each was last seen hot. */
  readonly #mitigated = new Map<string, number>();
  readonly #onChange: ((change: HotKeyChange) => void) | undefined;

  constructor(resource: string, options: CompiledHotKeyOptions, onChange?: (change: HotKeyChange) => void) {
    this.#resource = resource;
    this.#options = options;
    this.#sketch = new WindowedSpaceSaving(options.capacity, options.windowMs);
    this.#onChange = onChange;
  }

  get options(): CompiledHotKeyOptions {
    return this.#options;
  }

  /**
   * New options of the same sketch shape (capacity and window): what was counted carries on.
   * Mitigations end at once when the new options have no action.
   */
  reconfigure(options: CompiledHotKeyOptions): void {
    this.#options = options;
    if (options.action === undefined) for (const key of [...this.#mitigated.keys()]) this.#end(key);
  }

  /** True if `options` keep this sketch's shape (see {@link reconfigure}). */
  fits(options: CompiledHotKeyOptions): boolean {
    return options.capacity === this.#options.capacity && options.windowMs === this.#options.windowMs;
  }

  /** Counts one call on `key` at `now`; true if the key is mitigated (its calls are to be leased). */
  record(key: string, now: number): boolean {
    this.#sketch.add(key, 1, now);
    const o = this.#options;
    if (o.action === undefined) return false;
    if (this.#isHot(key, now)) {
      if (!this.#mitigated.has(key)) this.#start(key, now);
      this.#mitigated.set(key, now);
      return true;
    }
    const lastHot = this.#mitigated.get(key);
    if (lastHot === undefined) return false;
    if (now - lastHot < o.coolAfterMs) return true;
    this.#end(key);
    return false;
  }

  /** True if `key` is mitigated now (without counting a call). */
  mitigated(key: string): boolean {
    return this.#mitigated.size > 0 && this.#mitigated.has(key);
  }

  /** Keys mitigated now. */
  get mitigatedCount(): number {
    return this.#mitigated.size;
  }

  /** The heaviest keys at `now`. */
  report(now: number): HotKeyReport {
    const { windowMs, report } = this.#options;
    const calls = this.#sketch.total(now);
    const keys = this.#sketch.top(report, now).map((e) => ({
      key: e.key,
      calls: round(e.count),
      error: round(e.count - e.guaranteed),
      rate: round((e.count * 1000) / windowMs),
      share: calls > 0 ? round(e.count / calls) : 0,
      mitigation: this.#mitigated.has(e.key) ? ('lease' as const) : undefined,
    }));
    return { resource: this.#resource, windowMs, calls: round(calls), keys, mitigated: this.#mitigated.size };
  }

  /** Ends every mitigation (the resource was removed or lost its action). */
  clear(): void {
    for (const key of [...this.#mitigated.keys()]) this.#end(key);
  }

  #isHot(key: string, now: number): boolean {
    const { rate, share, windowMs } = this.#options;
    const { guaranteed } = this.#sketch.estimate(key, now);
    if (rate > 0 && (guaranteed * 1000) / windowMs < rate) return false;
    if (share > 0) {
      const total = this.#sketch.total(now);
      if (total <= 0 || guaranteed / total < share) return false;
    }
    return true;
  }

  #start(key: string, now: number): void {
    if (this.#mitigated.size >= this.#options.capacity) {
      // Full: let go of the key seen hot longest ago (Map order is not by last-hot time).
      let coolest: string | undefined;
      let at = Infinity;
      for (const [k, t] of this.#mitigated) {
        if (t < at) {
          at = t;
          coolest = k;
        }
      }
      if (coolest !== undefined) this.#end(coolest);
    }
    this.#mitigated.set(key, now);
    this.#onChange?.({ key, mitigation: 'lease', active: true });
  }

  #end(key: string): void {
    if (!this.#mitigated.delete(key)) return;
    this.#onChange?.({ key, mitigation: 'lease', active: false });
  }
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

/**
 * A limiter's hot-key trackers, one per resource that configures `hotKeys`, kept in step with
 * the resources' options as rules change (what was counted carries on while the sketch's shape
 * stays).
 */
export class HotKeyTrackers {
  readonly #trackers = new Map<string, HotKeys>();
  readonly #clock: Clock;
  readonly #onChange: (resource: string, change: HotKeyChange) => void;

  constructor(clock: Clock, onChange: (resource: string, change: HotKeyChange) => void) {
    this.#clock = clock;
    this.#onChange = onChange;
  }

  /** Makes, reconfigures or drops the tracker of resource `name` for its options (undefined: none). */
  sync(name: string, options: CompiledHotKeyOptions | undefined): void {
    const h = this.#trackers.get(name);
    if (options === undefined) {
      if (h !== undefined) this.drop(name);
      return;
    }
    if (h !== undefined && h.fits(options)) {
      h.reconfigure(options);
      return;
    }
    h?.clear();
    this.#trackers.set(name, new HotKeys(name, options, (change) => this.#onChange(name, change)));
  }

  drop(name: string): void {
    this.#trackers.get(name)?.clear();
    this.#trackers.delete(name);
  }

  /** Drops the trackers of every resource not in `names`. */
  keepOnly(names: ReadonlySet<string> | ReadonlyMap<string, unknown>): void {
    for (const name of [...this.#trackers.keys()]) if (!names.has(name)) this.drop(name);
  }

  /** Counts a call of resource `name` on caller key `key`. */
  record(name: string, key: string): void {
    this.#trackers.get(name)?.record(key, this.#clock.now());
  }

  /** True while caller key `key` of resource `name` is mitigated (its calls are leased). */
  mitigated(name: string, key: string): boolean {
    return this.#trackers.get(name)?.mitigated(key) === true;
  }

  /** The heaviest keys of every tracked resource, or of `name` alone, sorted by resource name. */
  report(name?: string): HotKeyReport[] {
    const now = this.#clock.now();
    const trackers =
      name === undefined ? [...this.#trackers.values()] : [this.#trackers.get(name)].filter((h) => h !== undefined);
    return trackers.map((h) => h.report(now)).sort((a, b) => (a.resource < b.resource ? -1 : 1));
  }
}
