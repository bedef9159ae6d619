import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../shared/errors.js';
import { HotKeys, compileHotKeyOptions, type HotKeyChange } from './hot-keys.js';

const leasing = compileHotKeyOptions(
  { windowMs: 1000, threshold: { rate: 100, share: 0.5 }, action: 'lease', coolAfterMs: 2000 },
  'hotKeys',
);

describe('compileHotKeyOptions', () => {
  it('fills the defaults', () => {
    expect(compileHotKeyOptions(true, 'h')).toMatchObject({ capacity: 64, report: 10, windowMs: 10_000, action: undefined });
  });

  it.each([
    [{ capacity: 2 }, 'h.capacity'],
    [{ report: 100 }, 'h.report'],
    [{ windowMs: 1 }, 'h.windowMs'],
    [{ threshold: {} }, 'h.threshold'],
    [{ threshold: { share: 2 } }, 'h.threshold.share'],
    [{ threshold: { rate: -1 } }, 'h.threshold.rate'],
    [{ threshold: { calls: 1 } }, 'h.threshold.calls'],
    [{ action: 'lease' }, 'h.action'],
    [{ threshold: { rate: 1 }, action: 'split' }, 'h.action'],
    [{ lease: true }, 'h.lease'],
    [{ colour: 'red' }, 'h.colour'],
  ])('refuses %j naming %s', (options, field) => {
    expect(() => compileHotKeyOptions(options as never, 'h')).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field }),
    );
  });
});

describe('HotKeys', () => {
  it('mitigates a key once it passes every bound of the threshold, and lets it go once it cools', () => {
    const changes: HotKeyChange[] = [];
    const h = new HotKeys('r', leasing, (c) => changes.push(c));
    // 99 calls in the window: below 100 calls a second.
    for (let i = 0; i < 99; i++) expect(h.record('hot', 0)).toBe(false);
    expect(h.record('hot', 0)).toBe(true);
    expect(changes).toEqual([{ key: 'hot', mitigation: 'lease', active: true }]);
    // Still hot by rate, but no longer half of the calls: it stays mitigated until it has cooled.
    for (let i = 0; i < 200; i++) h.record(`k${i}`, 10);
    expect(h.record('hot', 10)).toBe(true);
    expect(h.record('hot', 1999)).toBe(true);
    expect(h.record('hot', 2011)).toBe(false);
    expect(changes.at(-1)).toEqual({ key: 'hot', mitigation: 'lease', active: false });
    expect(h.mitigated('hot')).toBe(false);
  });

  it('never mitigates on counts a key inherited from keys it displaced', () => {
    const h = new HotKeys(
      'r',
      compileHotKeyOptions({ capacity: 4, windowMs: 1000, threshold: { rate: 50 }, action: 'lease' }, 'h'),
      undefined,
    );
    for (const k of ['a', 'b', 'c', 'd']) for (let i = 0; i < 60; i++) h.record(k, 0);
    // 'e' takes over a counter of 60: its estimate is 61, of which only 1 is its own.
    expect(h.record('e', 0)).toBe(false);
    const e = h.report(0).keys.find((k) => k.key === 'e');
    expect(e).toMatchObject({ calls: 61, error: 60 });
  });

  it('reports the heaviest keys with rate, share and mitigation, bounded by `report`', () => {
    const h = new HotKeys(
      'r',
      compileHotKeyOptions({ report: 2, windowMs: 1000, threshold: { rate: 100 }, action: 'lease' }, 'h'),
    );
    for (let i = 0; i < 150; i++) h.record('a', 0);
    for (let i = 0; i < 40; i++) h.record('b', 0);
    for (let i = 0; i < 10; i++) h.record('c', 0);
    const report = h.report(0);
    expect(report).toMatchObject({ resource: 'r', windowMs: 1000, calls: 200, mitigated: 1 });
    expect(report.keys).toEqual([
      { key: 'a', calls: 150, error: 0, rate: 150, share: 0.75, mitigation: 'lease' },
      { key: 'b', calls: 40, error: 0, rate: 40, share: 0.2, mitigation: undefined },
    ]);
  });

  it('tracks without mitigating when no action is configured, and ends mitigations when the action goes', () => {
    const h = new HotKeys('r', leasing);
    for (let i = 0; i < 200; i++) h.record('a', 0);
    expect(h.mitigated('a')).toBe(true);
    h.reconfigure(compileHotKeyOptions({ windowMs: 1000 }, 'h'));
    expect(h.mitigated('a')).toBe(false);
    expect(h.record('a', 1)).toBe(false);
    expect(h.report(1).keys[0]).toMatchObject({ key: 'a', calls: 201 });
  });

  it('mitigates at most `capacity` keys, letting the one seen hot longest ago go first', () => {
    const options = compileHotKeyOptions(
      { capacity: 4, windowMs: 1000, threshold: { rate: 1 }, action: 'lease', coolAfterMs: 1_000_000 },
      'h',
    );
    const h = new HotKeys('r', options);
    for (let t = 0; t < 6; t++) for (let i = 0; i < 5; i++) h.record(`k${t}`, t * 10_000);
    expect(h.mitigatedCount).toBeLessThanOrEqual(4);
    expect(h.mitigated('k5')).toBe(true);
    expect(h.mitigated('k0')).toBe(false);
  });
});
