import { Limiter, ManualClock } from '@sluice/core';
import { afterEach, describe, expect, it } from 'vitest';
import { OverrideTable } from './overrides.js';

const config = (limit: number) => ({ limits: [{ algorithm: 'fixed-window', limit, windowMs: 3_600_000 }] as const });

describe('OverrideTable', () => {
  const clock = new ManualClock(1_800_000_000_000);
  const limiter = new Limiter({ resources: {}, clock });
  afterEach(() => limiter.close());

  it('registers an override on first use, and drops it from the limiter once idle and room is needed', () => {
    let refused = 0;
    const table = new OverrideTable({ limiter, maxOverrides: 1, perMinute: 10, idleMs: 1000, clock, onRefused: () => refused++ });
    const release = table.hold('envoy:/override/a', config(1))!;
    expect(limiter.has('envoy:/override/a')).toBe(true);
    release();
    release();
    expect(table.hold('envoy:/override/b', config(2))).toBeUndefined();
    expect(refused).toBe(1);
    clock.advance(1000);
    expect(table.hold('envoy:/override/b', config(2))).toBeDefined();
    expect(limiter.has('envoy:/override/a')).toBe(false);
    expect(table.size).toBe(1);
  });

  it('never drops an override a request holds, however long it is held', () => {
    const table = new OverrideTable({ limiter, maxOverrides: 1, perMinute: 10, idleMs: 1000, clock });
    const release = table.hold('envoy:/override/c', config(1))!;
    clock.advance(60_000);
    expect(table.hold('envoy:/override/d', config(1))).toBeUndefined();
    release();
    // Released just now: idle only a second later.
    expect(table.hold('envoy:/override/d', config(1))).toBeUndefined();
    clock.advance(1000);
    expect(table.hold('envoy:/override/d', config(1))).toBeDefined();
    expect(limiter.has('envoy:/override/c')).toBe(false);
  });

  it('admits perMinute new overrides at once, then one every 60000 / perMinute ms; known ones always', () => {
    const table = new OverrideTable({ limiter, maxOverrides: 100, perMinute: 2, idleMs: 1000, clock });
    expect(table.hold('envoy:/override/e', config(1))).toBeDefined();
    expect(table.hold('envoy:/override/f', config(1))).toBeDefined();
    expect(table.hold('envoy:/override/g', config(1))).toBeUndefined();
    expect(table.hold('envoy:/override/e', config(1))).toBeDefined();
    clock.advance(29_999);
    expect(table.hold('envoy:/override/g', config(1))).toBeUndefined();
    clock.advance(1);
    expect(table.hold('envoy:/override/g', config(1))).toBeDefined();
    expect(table.hold('envoy:/override/h', config(1))).toBeUndefined();
  });

  it('admits none with perMinute or maxOverrides 0', () => {
    expect(
      new OverrideTable({ limiter, maxOverrides: 0, perMinute: 10, idleMs: 1000, clock }).hold('envoy:/override/i', config(1)),
    ).toBeUndefined();
    expect(
      new OverrideTable({ limiter, maxOverrides: 10, perMinute: 0, idleMs: 1000, clock }).hold('envoy:/override/i', config(1)),
    ).toBeUndefined();
  });
});
