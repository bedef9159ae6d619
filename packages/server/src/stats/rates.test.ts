import { describe, expect, it } from 'vitest';
import { RateHistory, limitPerSecond, rateRows, statusRows, type StatsSnapshot } from './rates.js';

const r = (resource: string, allowed: number, denied: number, shadowDenied = 0) => ({
  resource,
  allowed,
  denied,
  shadowDenied,
  limit: 10,
  remaining: 5,
});
const snap = (at: number, ...resources: ReturnType<typeof r>[]): StatsSnapshot => ({ at, version: 1, resources });

describe('rateRows', () => {
  it('computes allowed, denied and shadow-denied rates per second, busiest first', () => {
    const rows = rateRows(snap(1000, r('a', 10, 0), r('b', 100, 50, 4)), snap(3000, r('a', 30, 0), r('b', 110, 60, 8)));
    expect(rows.map((x) => [x.resource, x.rate, x.allowedRate, x.deniedRate, x.shadowDeniedRate])).toEqual([
      ['b', 10, 5, 5, 2],
      ['a', 10, 10, 0, 0],
    ]);
  });

  it('treats a new resource as counted from zero and a reset counter as zero, never negative', () => {
    const rows = rateRows(snap(0, r('old', 500, 500)), snap(1000, r('old', 2, 1), r('new', 4, 2)));
    expect(rows.find((x) => x.resource === 'new')).toMatchObject({ allowedRate: 4, deniedRate: 2 });
    expect(rows.find((x) => x.resource === 'old')).toMatchObject({ rate: 0, allowedRate: 0, deniedRate: 0 });
  });

  it('keeps statusRows to the top N, with rates per second and shares since start', () => {
    const rows = statusRows(snap(0, r('a', 0, 0), r('b', 0, 0, 0)), snap(2000, r('a', 1, 0), r('b', 5, 1, 2)), 1);
    expect(rows).toEqual([
      {
        resource: 'b',
        rate: 3,
        allowedRate: 2.5,
        deniedRate: 0.5,
        shadowDeniedRate: 1,
        limit: 10,
        remaining: 5,
        deniedShareSinceStart: 1 / 6,
        shadowDeniedShareSinceStart: 2 / 6,
      },
    ]);
  });
});

describe('RateHistory', () => {
  it('starts charting from the second snapshot and drops points older than the window', () => {
    const h = new RateHistory({ windowMs: 2000 });
    h.add(snap(0, r('a', 0, 0)));
    expect(h.resources()).toEqual([]);
    h.add(snap(1000, r('a', 2, 1)));
    h.add(snap(2000, r('a', 4, 1)));
    h.add(snap(3000, r('a', 4, 3)));
    expect(h.points('a').map((p) => [p.at, p.allowedRate, p.deniedRate])).toEqual([
      [1000, 2, 1],
      [2000, 2, 0],
      [3000, 0, 2],
    ]);
    h.add(snap(4000, r('a', 4, 3)));
    expect(h.points('a').map((p) => p.at)).toEqual([2000, 3000, 4000]);
    expect(h.latest()?.at).toBe(4000);
  });

  it('orders resources by load over the window and keeps at most maxResources', () => {
    const h = new RateHistory({ maxResources: 2 });
    h.add(snap(0, r('quiet', 0, 0), r('busy', 0, 0), r('mid', 0, 0)));
    h.add(snap(1000, r('quiet', 1, 0), r('busy', 50, 50), r('mid', 5, 0)));
    expect(h.resources()).toEqual(['busy', 'mid']);
    expect(h.points('quiet')).toEqual([]);
  });

  it('ignores a snapshot that is not newer and forgets resources the server no longer lists', () => {
    const h = new RateHistory();
    h.add(snap(0, r('a', 0, 0), r('b', 0, 0)));
    h.add(snap(1000, r('a', 1, 0), r('b', 1, 0)));
    h.add(snap(1000, r('a', 9, 0)));
    expect(h.resources()).toEqual(['a', 'b']);
    h.add(snap(2000, r('a', 10, 0)));
    expect(h.resources()).toEqual(['a']);
  });
});

describe('limitPerSecond', () => {
  it('is the tightest rate limit per second, ignoring concurrency limits', () => {
    expect(
      limitPerSecond([
        { algorithm: 'fixed-window', limit: 600, windowMs: 60_000 },
        { algorithm: 'token-bucket', limit: 20, windowMs: 1000 },
      ]),
    ).toBe(10);
    expect(limitPerSecond([{ algorithm: 'concurrency', limit: 5, windowMs: 1000 }])).toBeUndefined();
    expect(limitPerSecond([])).toBeUndefined();
  });
});
