import { DEFAULT_BOOKING, Limiter, ManualClock, compileResource } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { compileRules, diffRuleSets, unifiedDiff } from './index.js';

const RULES = `
resources:
  api:booked:
    limits: { algorithm: fixed-window, limit: 2, windowMs: 10000 }
    booking: { maxAheadMs: 30000, claimWindowMs: 2000, maxBookings: 1 }
  api:partly:
    limits: { algorithm: gcra, limit: 10, windowMs: 1000, burst: 5 }
    booking: { claimWindowMs: 500 }
  api:plain: { limits: { algorithm: gcra, limit: 10 } }
`;

describe('booking bounds in rule files', () => {
  const rules = compileRules(RULES, { file: 'rules.yaml' });

  it('are emitted as the limiter takes them, frozen, and absent when not written', () => {
    expect(rules.resources['api:booked']!.booking).toEqual({ maxAheadMs: 30_000, claimWindowMs: 2000, maxBookings: 1 });
    expect(Object.isFrozen(rules.resources['api:booked']!.booking)).toBe(true);
    expect(rules.resources['api:partly']!.booking).toEqual({ claimWindowMs: 500 });
    expect(rules.resources['api:plain']!.booking).toBeUndefined();
  });

  it("compile to core's bounds, with core's defaults for what the file leaves out", () => {
    const clock = new ManualClock();
    expect(compileResource('api:booked', rules.resources['api:booked']!, clock).booking).toEqual({
      maxAheadMs: 30_000,
      claimWindowMs: 2000,
      maxBookings: 1,
      maxShare: DEFAULT_BOOKING.maxShare,
    });
    expect(compileResource('api:partly', rules.resources['api:partly']!, clock).booking).toEqual({
      ...DEFAULT_BOOKING,
      claimWindowMs: 500,
    });
    expect(compileResource('api:plain', rules.resources['api:plain']!, clock).booking).toEqual(DEFAULT_BOOKING);
  });

  it('bound what the limiter books', async () => {
    const clock = new ManualClock(1_000_000);
    const limiter = new Limiter({ clock, resources: {} });
    limiter.setResources(rules.resources);
    try {
      for (let i = 0; i < 2; i++) expect((await limiter.try('api:booked', { key: 'k' })).allowed).toBe(true);
      const first = await limiter.book('api:booked', { key: 'k', id: 'one' });
      expect(first.booking).toMatchObject({ outcome: 'booked', id: 'one' });
      // The claim window is the file's 2 s, not core's default 1 s.
      expect(first.booking!.expiresInMs - first.booking!.startsInMs).toBe(2000);
      // maxBookings: 1 — a second booking on the key is a plain denial.
      expect((await limiter.book('api:booked', { key: 'k', id: 'two' })).booking).toMatchObject({ outcome: 'denied' });
    } finally {
      await limiter.close();
    }
  });

  it('change the hash and show in the diff field by field', () => {
    const after = compileRules(
      RULES.replace('maxAheadMs: 30000, ', '')
        .replace('booking: { claimWindowMs: 500 }', 'shadow: false')
        .replace(
          'api:plain: { limits: { algorithm: gcra, limit: 10 } }',
          'api:plain: { limits: { algorithm: gcra, limit: 10 }, booking: { maxBookings: 50 } }',
        ),
      { file: 'rules.yaml' },
    );
    expect(after.hash).not.toBe(rules.hash);
    const d = diffRuleSets(rules, after);
    expect(d.resources.changed).toEqual([
      { name: 'api:booked', changes: [{ path: 'booking.maxAheadMs', before: 30_000 }] },
      { name: 'api:partly', changes: [{ path: 'booking', before: { claimWindowMs: 500 } }] },
      { name: 'api:plain', changes: [{ path: 'booking', after: { maxBookings: 50 } }] },
    ]);
    const text = unifiedDiff(RULES, RULES.replace('maxBookings: 1', 'maxBookings: 5'), { fromLabel: 'v1', toLabel: 'v2' });
    expect(text).toContain('-    booking: { maxAheadMs: 30000, claimWindowMs: 2000, maxBookings: 1 }');
    expect(text).toContain('+    booking: { maxAheadMs: 30000, claimWindowMs: 2000, maxBookings: 5 }');
  });
});
