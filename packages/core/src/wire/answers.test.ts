import { describe, expect, it } from 'vitest';
import type { Decision } from '../shared/decision.js';
import { SluiceError, isSluiceError } from '../shared/errors.js';
import { decodeDecision, decodeReserve, decodeResults, encodeDecision, encodeReserve } from './answers.js';

describe('decoding answers', () => {
  it('refuses malformed decisions as protocol faults', () => {
    for (const body of [null, [], { allowed: 'yes' }, { allowed: true, limit: 1, remaining: 0 }]) {
      expect(() => decodeDecision(body)).toThrow(SluiceError);
      try {
        decodeDecision(body);
      } catch (e) {
        expect(isSluiceError(e, 'SLUICE_ERR_STORE_PROTOCOL')).toBe(true);
      }
    }
    const d = decodeDecision({
      allowed: false,
      limit: 5,
      remaining: 0,
      retryAfterMs: 10,
      resetAfterMs: 20,
      reason: 'rate_limited',
      limitId: '0',
      source: 'prefilter',
    });
    expect(d).toMatchObject({ allowed: false, source: 'prefilter', statuses: [] });
    expect(d.permitId).toBeUndefined();
    expect(d.booking).toBeUndefined();
  });

  it("reads a decision's permit from permitId only", () => {
    const base = { allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 0, reason: 'allowed', limitId: '0' };
    expect(decodeDecision({ ...base, permitId: 'p2' })).toMatchObject({ permitId: 'p2' });
    expect(decodeDecision({ ...base, leaseId: 'old' }).permitId).toBeUndefined();
  });

  it("decodes a decision's booking, and refuses a malformed one", () => {
    const base = {
      allowed: false,
      limit: 5,
      remaining: 0,
      retryAfterMs: 900,
      resetAfterMs: 900,
      reason: 'rate_limited',
      limitId: '0',
    };
    const booking = { outcome: 'booked', id: 'job-1', startsInMs: 900, expiresInMs: 1900 };
    expect(decodeDecision({ ...base, booking }).booking).toEqual(booking);
    for (const bad of [
      null,
      'booked',
      { ...booking, outcome: 'maybe' },
      { ...booking, id: 3 },
      { ...booking, startsInMs: '1' },
      { outcome: 'booked', id: 'x' },
    ]) {
      expect(() => decodeDecision({ ...base, booking: bad }), JSON.stringify(bad)).toThrow(/malformed booking/);
    }
  });

  it('refuses a reservation without a valid granted, and a batch of the wrong length', () => {
    const base = { allowed: true, limit: 5, remaining: 4, retryAfterMs: 0, resetAfterMs: 0, reason: 'allowed', limitId: '0' };
    expect(decodeReserve({ ...base, granted: 3, at: 7 })).toMatchObject({ granted: 3, at: 7, decision: { allowed: true } });
    expect(decodeReserve({ ...base, granted: 0 }).at).toBe(0);
    for (const granted of [undefined, -1, 1.5, '3']) {
      expect(() => decodeReserve({ ...base, granted }), String(granted)).toThrow(/granted/);
    }
    expect(decodeResults({ results: [1, 2] }, 2)).toEqual([1, 2]);
    expect(() => decodeResults({ results: [1] }, 2)).toThrow(/wrong number of results/);
    expect(() => decodeResults(null, 1)).toThrow(/wrong number of results/);
  });
});

describe('encoding answers', () => {
  const denied: Decision = {
    allowed: false,
    limit: 5,
    remaining: 0,
    retryAfterMs: 100.2,
    resetAfterMs: 999.01,
    reason: 'rate_limited',
    limitId: '0',
    statuses: [
      { id: '0', algorithm: 'fixed-window', allowed: false, limit: 5, remaining: 0, retryAfterMs: 100.2, resetAfterMs: 999.01 },
    ],
    waitedMs: 12.6,
  };

  it('rounds the retry and reset up, the wait to the nearest ms, and gives statuses only when asked', () => {
    const body = encodeDecision(denied);
    expect(body).toMatchObject({ retryAfterMs: 101, resetAfterMs: 1000, waitedMs: 13, source: 'store' });
    expect(body).not.toHaveProperty('statuses');
    expect(encodeDecision(denied, true).statuses).toEqual(denied.statuses);
  });

  it('writes a permit under permitId only, and reads back what it wrote', () => {
    const held: Decision = { ...denied, allowed: true, reason: 'allowed', retryAfterMs: 0, permitId: 'p1' };
    const body = encodeDecision(held, true);
    expect(body.permitId).toBe('p1');
    expect(body).not.toHaveProperty('leaseId');
    const back = decodeDecision(JSON.parse(JSON.stringify(body)));
    expect(back).toMatchObject({ allowed: true, permitId: 'p1', retryAfterMs: 0, resetAfterMs: 1000, waitedMs: 13 });
    expect(back.statuses).toEqual(held.statuses);
  });

  it('answers a reservation with its statuses, what it got and its stamp', () => {
    const body = encodeReserve({ granted: 2, at: 42, decision: denied });
    expect(body).toMatchObject({ granted: 2, at: 42, retryAfterMs: 101, statuses: denied.statuses });
    expect(decodeReserve(JSON.parse(JSON.stringify(body)))).toMatchObject({ granted: 2, at: 42 });
  });
});
