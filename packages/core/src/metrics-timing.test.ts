import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { Limiter, type LimiterOptions } from './admission/limiter.js';
import { createPrometheusObserver } from './metrics.js';
import { ManualClock } from './shared/clock.js';
import { ErrorCodes, SluiceError } from './shared/errors.js';
import type { LimiterObserver } from './shared/observer.js';
import { MemoryStore } from './store/memory-store.js';
import type { LimitStore, StoreCall } from './store/store.js';

/** A clock that counts its readings. */
class CountingClock extends ManualClock {
  reads = 0;
  override now(): number {
    this.reads++;
    return super.now();
  }
}

/**
 * A store outside the process, as the limiter sees one: each call moves the limiter's clock on by
 * `roundTripMs` (the time it spends on the wire), then fails if `away`, else is decided in memory.
 */
class RoundTripStore implements LimitStore {
  readonly name = 'round-trip';
  roundTripMs = 3;
  away = false;
  readonly #memory = new MemoryStore({ clock: new ManualClock(), sweepIntervalMs: 0 });
  readonly #clock: ManualClock;

  constructor(clock: ManualClock) {
    this.#clock = clock;
  }

  #trip<T>(call: () => Promise<T>): Promise<T> {
    this.#clock.advance(this.roundTripMs);
    return this.away ? Promise.reject(new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'connection refused')) : call();
  }

  consume: LimitStore['consume'] = (r) => this.#trip(() => this.#memory.consume(r));
  adjust: LimitStore['adjust'] = (r) => this.#trip(() => this.#memory.adjust(r));
  reserve: LimitStore['reserve'] = (r) => this.#trip(() => this.#memory.reserve(r));
  renew: LimitStore['renew'] = (r) => this.#trip(() => this.#memory.renew(r));
  release: LimitStore['release'] = (r) => this.#trip(() => this.#memory.release(r));
  ping: LimitStore['ping'] = () => this.#trip(() => this.#memory.ping());
  close: LimitStore['close'] = () => this.#memory.close();
}

const gcra = { algorithm: 'gcra', limit: 10, windowMs: 1000, burst: 1 } as const;

function limiterWith(observer: LimiterObserver, clock: ManualClock, store?: LimitStore, onStoreFailure?: 'open') {
  const options: LimiterOptions = {
    resources: { api: gcra },
    clock,
    random: () => 0,
    observer,
    failover: { logger: false },
    ...(store === undefined ? {} : { store }),
    ...(onStoreFailure === undefined ? {} : { onStoreFailure }),
  };
  return new Limiter(options);
}

/** The value of one sample line of the exposition, e.g. `sluice_x_count{a="b"}`. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('decision durations', () => {
  it('time each decision from the call to its answer, by who decided', async () => {
    const registry = new Registry();
    const clock = new ManualClock();
    const store = new RoundTripStore(clock);
    const limiter = limiterWith(createPrometheusObserver({ registry }), clock, store);
    expect((await limiter.try('api', { key: 'k' })).allowed).toBe(true);
    // Over the limit: the store denies (a round trip), then the pre-filter does (none).
    expect((await limiter.try('api', { key: 'k' })).source).toBeUndefined();
    const local = await limiter.try('api', { key: 'k' });
    expect(local.source).toBe('prefilter');
    const text = await registry.metrics();
    const store3 = 'resource="api",source="store"';
    expect(sample(text, `sluice_decision_duration_seconds_count{${store3}}`)).toBe(2);
    expect(sample(text, `sluice_decision_duration_seconds_sum{${store3}}`)).toBeCloseTo(0.006, 9);
    expect(sample(text, `sluice_decision_duration_seconds_bucket{le="0.0025",${store3}}`)).toBe(0);
    expect(sample(text, `sluice_decision_duration_seconds_bucket{le="0.005",${store3}}`)).toBe(2);
    const pre = 'resource="api",source="prefilter"';
    expect(sample(text, `sluice_decision_duration_seconds_bucket{le="0.00005",${pre}}`)).toBe(1);
    expect(sample(text, `sluice_decision_duration_seconds_sum{${pre}}`)).toBe(0);
    await limiter.close();
  });

  it("include an acquire's wait in its queue", async () => {
    const events: { mode: string; durationMs: number }[] = [];
    const clock = new ManualClock();
    const limiter = limiterWith({ decided: (e) => events.push({ mode: e.mode, durationMs: e.durationMs }) }, clock);
    await limiter.try('api');
    const waited = limiter.acquire('api', { maxWaitMs: 1000 });
    await clock.advanceAsync(200);
    expect((await waited).allowed).toBe(true);
    expect(events).toEqual([
      { mode: 'try', durationMs: 0 },
      // Granted when the retry-after of the denial that queued it ran out.
      { mode: 'acquire', durationMs: 100 },
    ]);
    await limiter.close();
  });

  it('read the clock twice per decision while the observer times them, and never without', async () => {
    const readsOf = async (observer: LimiterObserver, store?: (clock: ManualClock) => LimitStore) => {
      const clock = new CountingClock();
      const limiter = limiterWith(observer, clock, store?.(clock));
      await limiter.try('api', { key: 'k' });
      await limiter.try('api', { key: 'k' });
      // Answered by the pre-filter, which learned of the denial.
      expect(limiter.trySync('api', { key: 'k' })?.source).toBe('prefilter');
      const reads = clock.reads;
      await limiter.close();
      return reads;
    };
    const none = await readsOf({});
    expect(await readsOf({ decided: () => undefined })).toBe(none + 6);
    // The in-memory store makes no round trip: nothing to time.
    expect(await readsOf({ storeCalled: () => undefined })).toBe(none);
    const remote = (clock: ManualClock) => new RoundTripStore(clock);
    // Two round trips (the pre-filter's answer makes none), two readings each.
    expect(await readsOf({ storeCalled: () => undefined }, remote)).toBe((await readsOf({}, remote)) + 4);
  });
});

describe('store call durations', () => {
  it('time every call that leaves the process by operation, and count the failed ones', async () => {
    const registry = new Registry();
    const calls: StoreCall[] = [];
    const clock = new ManualClock();
    const store = new RoundTripStore(clock);
    const prom = createPrometheusObserver({ registry });
    const limiter = limiterWith({ ...prom, storeCalled: (c) => (calls.push(c), prom.storeCalled?.(c)) }, clock, store, 'open');
    await limiter.try('api', { key: 'a' });
    await limiter.adjust('api', { key: 'a', delta: 1 });
    store.away = true;
    const d = await limiter.try('api', { key: 'b' });
    expect(d.source).toBe('fallback');
    expect(calls.map((c) => [c.operation, c.durationMs, c.error === undefined])).toEqual([
      ['consume', 3, true],
      ['adjust', 3, true],
      ['consume', 3, false],
    ]);
    expect(calls[2]?.error).toMatchObject({ code: ErrorCodes.STORE_UNAVAILABLE });
    const text = await registry.metrics();
    expect(sample(text, 'sluice_store_call_duration_seconds_count{operation="consume"}')).toBe(2);
    expect(sample(text, 'sluice_store_call_duration_seconds_bucket{le="0.005",operation="adjust"}')).toBe(1);
    expect(sample(text, 'sluice_store_call_errors_total{operation="consume"}')).toBe(1);
    expect(sample(text, 'sluice_store_call_errors_total{operation="adjust"}')).toBeUndefined();
    // The fallback's decision is timed too, under its own source.
    expect(sample(text, 'sluice_decision_duration_seconds_count{resource="api",source="fallback"}')).toBe(1);
    await limiter.close();
  });

  it("report nothing for the in-memory store's calls", async () => {
    const calls: StoreCall[] = [];
    const limiter = limiterWith({ storeCalled: (c) => calls.push(c) }, new ManualClock());
    await limiter.try('api');
    expect(calls).toEqual([]);
    await limiter.close();
  });
});
