import { describe, expect, it } from 'vitest';
import {
  ClockSkewMonitor,
  SkewEstimator,
  skewExceeds,
  storeClock,
  type ClockSkewEstimate,
  type TimeSource,
} from './clock-skew.js';
import { ManualClock } from './clock.js';
import { isSluiceError } from './errors.js';

const EPOCH = 1_780_000_000_000;

/**
 * A host whose wall clock is `shiftMs` ahead of the store's, and a store answering its time
 * `toStore` ms after the reading is sent and `back` ms before it arrives (both on the manual clock).
 */
function world(shiftMs: number) {
  const clock = new ManualClock(0);
  const storeNow = () => EPOCH + clock.now();
  const wallClock = () => storeNow() + shiftMs;
  const legs = { toStore: 5, back: 5 };
  let failNext: Error | undefined;
  const source: TimeSource = () => {
    if (failNext) {
      const e = failNext;
      failNext = undefined;
      return Promise.reject(e);
    }
    clock.advance(legs.toStore);
    const timeMs = storeNow();
    clock.advance(legs.back);
    return Promise.resolve({ timeMs });
  };
  const lines: { level: string; obj: object; msg: string }[] = [];
  const logger = {
    info: (obj: object, msg: string) => lines.push({ level: 'info', obj, msg }),
    warn: (obj: object, msg: string) => lines.push({ level: 'warn', obj, msg }),
  };
  return { clock, storeNow, wallClock, legs, source, lines, logger, fail: (e: Error) => (failNext = e) };
}

describe('SkewEstimator', () => {
  it('puts the store time at the middle of the round trip, true within half of it', () => {
    const e = new SkewEstimator();
    // Sent at local 1000, answered 40 ms later with store time 6020: the store is 5000 ahead.
    const est = e.add({ sentAt: 1000, rttMs: 40, reading: { timeMs: 6020 } });
    expect(est).toMatchObject({ measured: true, offsetMs: 5000, uncertaintyMs: 20, rttMs: 40 });
  });

  it('keeps the reading with the smallest round trip among the last few', () => {
    const e = new SkewEstimator(3);
    e.add({ sentAt: 0, rttMs: 4, reading: { timeMs: 102 } }); // offset 100 ± 2
    // A reading held up on the way back (a busy event loop) looks 40 ms early: ignored.
    expect(e.add({ sentAt: 1000, rttMs: 100, reading: { timeMs: 1110 } }).offsetMs).toBe(100);
    expect(e.add({ sentAt: 2000, rttMs: 60, reading: { timeMs: 2125 } }).offsetMs).toBe(100);
    // The good reading leaves the window: the best of the remaining ones wins.
    expect(e.add({ sentAt: 3000, rttMs: 80, reading: { timeMs: 3140 } }).offsetMs).toBe(95);
  });

  it('starts again from a reading that cannot agree with the estimate (a stepped clock)', () => {
    const e = new SkewEstimator(8);
    e.add({ sentAt: 0, rttMs: 2, reading: { timeMs: 101 } }); // 100 ± 1
    // The host clock was stepped 3 s back: a worse round trip, but 3100 ± 10 excludes 100 ± 1.
    expect(e.add({ sentAt: 1000, rttMs: 20, reading: { timeMs: 4110 } })).toMatchObject({ offsetMs: 3100, uncertaintyMs: 10 });
    // From then on the best of the new readings.
    expect(e.add({ sentAt: 2000, rttMs: 4, reading: { timeMs: 5104 } }).offsetMs).toBe(3102);
  });

  it("adds the source's own uncertainty and refuses readings that cannot be true", () => {
    const e = new SkewEstimator();
    expect(e.add({ sentAt: 0, rttMs: 10, reading: { timeMs: 5, uncertaintyMs: 3 } }).uncertaintyMs).toBe(8);
    for (const bad of [
      { sentAt: 0, rttMs: -1, reading: { timeMs: 0 } },
      { sentAt: 0, rttMs: 1, reading: { timeMs: Number.NaN } },
      { sentAt: 0, rttMs: 1, reading: { timeMs: 0, uncertaintyMs: -2 } },
    ]) {
      let error: unknown;
      try {
        e.add(bad);
      } catch (err) {
        error = err;
      }
      expect(isSluiceError(error, 'SLUICE_ERR_INVALID_OPTIONS')).toBe(true);
    }
    expect(e.estimate.offsetMs).toBe(0);
  });
});

describe('skewExceeds', () => {
  const est = (offsetMs: number, uncertaintyMs: number): ClockSkewEstimate => ({
    measured: true,
    offsetMs,
    uncertaintyMs,
    rttMs: 0,
  });

  it('changes only when the estimate is sure of the side of the threshold', () => {
    expect(skewExceeds(false, est(1200, 100), 1000)).toBe(true);
    expect(skewExceeds(false, est(-1200, 100), 1000)).toBe(true);
    // 1050 ± 100 might be within: stays as it was, either way.
    expect(skewExceeds(false, est(1050, 100), 1000)).toBe(false);
    expect(skewExceeds(true, est(1050, 100), 1000)).toBe(true);
    expect(skewExceeds(true, est(900, 100), 1000)).toBe(false);
    expect(skewExceeds(true, { measured: false, offsetMs: 0, uncertaintyMs: 0, rttMs: 0 }, 1000)).toBe(true);
  });
});

describe('storeClock', () => {
  it('adds the offset as it is at each call', () => {
    const offset = { offsetMs: 0 };
    const now = storeClock(() => 1000, offset);
    expect(now()).toBe(1000);
    offset.offsetMs = -250;
    expect(now()).toBe(750);
    const wall = () => 5;
    expect(storeClock(wall, undefined)).toBe(wall);
  });
});

describe('ClockSkewMonitor', () => {
  it("measures a host clock 5 s ahead and reads the store's clock", async () => {
    const w = world(5000);
    const m = new ClockSkewMonitor({ source: w.source, wallClock: w.wallClock, clock: w.clock, logger: false });
    expect(m.status()).toMatchObject({ measured: false, offsetMs: 0 });
    expect(m.now()).toBe(w.wallClock());
    await m.sample();
    expect(m.offsetMs).toBe(-5000);
    expect(m.uncertaintyMs).toBe(5);
    expect(m.now()).toBe(w.storeNow());
    await m.close();
  });

  it('is exact only within its uncertainty when the legs of the round trip differ', async () => {
    const w = world(-3000);
    w.legs.toStore = 30;
    w.legs.back = 2;
    const m = new ClockSkewMonitor({ source: w.source, wallClock: w.wallClock, clock: w.clock, logger: false });
    const est = await m.sample();
    expect(Math.abs(est.offsetMs - 3000)).toBeLessThanOrEqual(est.uncertaintyMs);
    expect(est.offsetMs).not.toBe(3000);
    await m.close();
  });

  it('warns once when the skew goes over the threshold and once when it is back, counting it', async () => {
    const w = world(0);
    let shift = 0;
    const wallClock = () => w.wallClock() + shift;
    const crossings: boolean[] = [];
    const m = new ClockSkewMonitor({
      source: w.source,
      wallClock,
      clock: w.clock,
      window: 1,
      thresholdMs: 1000,
      logger: w.logger,
      observer: { thresholdCrossed: ({ over }) => crossings.push(over) },
    });
    await m.sample();
    expect(w.lines).toEqual([]);
    shift = 4000;
    await m.sample();
    await m.sample();
    expect(w.lines.map((l) => l.level)).toEqual(['warn']);
    expect(w.lines[0]!.obj).toMatchObject({ store: 'store', offsetMs: -4000, thresholdMs: 1000 });
    expect(m.status()).toMatchObject({ skewed: true, warnings: 1, samples: 3 });
    shift = 100;
    await m.sample();
    expect(w.lines.map((l) => l.level)).toEqual(['warn', 'info']);
    expect(crossings).toEqual([true, false]);
    expect(m.status()).toMatchObject({ skewed: false, warnings: 1 });
    await m.close();
  });

  it('reads every intervalMs from start, keeps the estimate through failures, and stops on close', async () => {
    const w = world(2000);
    const failures: unknown[] = [];
    const m = new ClockSkewMonitor({
      source: w.source,
      wallClock: w.wallClock,
      clock: w.clock,
      intervalMs: 1000,
      logger: false,
      observer: { failed: (e) => failures.push(e) },
    });
    m.start();
    m.start();
    await w.clock.advanceAsync(0);
    expect(m.status().samples).toBe(1);
    w.fail(new Error('store away'));
    await w.clock.advanceAsync(1000);
    expect(m.status()).toMatchObject({ samples: 1, failures: 1, offsetMs: -2000 });
    expect(failures).toHaveLength(1);
    await w.clock.advanceAsync(1000);
    expect(m.status().samples).toBe(2);
    await m.close();
    expect(w.clock.pendingTimers).toBe(0);
    await w.clock.advanceAsync(5000);
    expect(m.status().samples).toBe(2);
    expect((await m.sample()).offsetMs).toBe(-2000);
  });

  it('logs one line when readings start failing and one when one is answered again', async () => {
    const w = world(200);
    const m = new ClockSkewMonitor({ source: w.source, wallClock: w.wallClock, clock: w.clock, name: 'redis', logger: w.logger });
    await m.sample();
    for (let i = 0; i < 3; i++) {
      w.fail(new Error('Connection is closed.'));
      await m.sample();
      w.clock.advance(1000);
    }
    await m.sample();
    expect(w.lines.map((l) => `${l.level} ${l.msg}`)).toEqual([
      'warn clock of redis not read (Connection is closed.): age checks keep the last measured offset (-200 ms) until it answers',
      'info clock of redis read again after 3.0 s (3 readings failed)',
    ]);
    expect(w.lines[0]!.obj).toMatchObject({ event: 'clock_unreadable', store: 'redis' });
    expect(m.status()).toMatchObject({ samples: 2, failures: 3 });
    await m.close();
    expect(w.clock.pendingTimers).toBe(0);
  });

  it('refuses bad options with the field named', () => {
    const source: TimeSource = () => Promise.resolve({ timeMs: 0 });
    const cases: [object, string][] = [
      [{}, 'source'],
      [{ source, intervalMs: 10 }, 'intervalMs'],
      [{ source, thresholdMs: 0 }, 'thresholdMs'],
      [{ source, window: 65 }, 'window'],
      [{ source, wallClock: 5 }, 'wallClock'],
      [{ source, name: '' }, 'name'],
    ];
    for (const [options, field] of cases) {
      let error: unknown;
      try {
        new ClockSkewMonitor(options as never);
      } catch (err) {
        error = err;
      }
      expect(isSluiceError(error, 'SLUICE_ERR_INVALID_OPTIONS')).toBe(true);
      expect((error as { field?: string }).field).toBe(field);
    }
  });
});
