import { describe, expect, it } from 'vitest';
import { WindowTable } from './window-table.js';
import { AddResult, addEvent, emptyWindow, isIdle, windowRequests, windowShape, windowStats } from './window.js';

const T0 = 1_700_000_000_000;

describe('sliding window', () => {
  const shape = windowShape(1000, 10);

  it('sums the slices within the window and forgets the ones that slid out', () => {
    const w = emptyWindow(shape);
    for (let i = 0; i < 10; i++) addEvent(w, shape, T0 + i * 100, T0 + i * 100, 200, false);
    expect(windowRequests(w, shape, T0 + 950)).toBe(10);
    // One slice later the first slice has left the window.
    expect(windowRequests(w, shape, T0 + 1000)).toBe(9);
    expect(windowRequests(w, shape, T0 + 1500)).toBe(4);
    expect(windowRequests(w, shape, T0 + 1900)).toBe(0);
    expect(isIdle(w, shape, T0 + 1900)).toBe(true);
    expect(isIdle(w, shape, T0 + 1899)).toBe(false);
  });

  it('reuses a ring position for a newer slice instead of adding to the stale one', () => {
    const w = emptyWindow(shape);
    addEvent(w, shape, T0, T0, 200, false, 5);
    // T0 + 1000 maps to the same ring position, one full window later.
    addEvent(w, shape, T0 + 1000, T0 + 1000, 200, false);
    expect(windowRequests(w, shape, T0 + 1000)).toBe(1);
  });

  it('counts errors and status classes, with weights', () => {
    const w = emptyWindow(shape);
    addEvent(w, shape, T0, T0, 200, false);
    addEvent(w, shape, T0, T0, 302, false);
    addEvent(w, shape, T0, T0, 401, false, 3);
    addEvent(w, shape, T0, T0, 503, true);
    addEvent(w, shape, T0, T0, 0, true);
    expect(windowStats(w, shape, T0 + 10)).toEqual({
      requests: 7,
      errors: 2,
      status2xx: 1,
      status3xx: 1,
      status4xx: 3,
      status5xx: 1,
    });
  });

  it('refuses events older than the window and counts future ones now', () => {
    const w = emptyWindow(shape);
    expect(addEvent(w, shape, T0 + 5000, T0, 200, false)).toBe(AddResult.TOO_OLD);
    expect(addEvent(w, shape, T0, T0 + 60_000, 200, false)).toBe(AddResult.ADDED);
    expect(windowRequests(w, shape, T0)).toBe(1);
    expect(windowRequests(w, shape, T0 + 5000)).toBe(0);
  });

  it('keeps long windows in coarse slices', () => {
    const long = windowShape(300_000, 10);
    const w = emptyWindow(long);
    for (let m = 0; m < 5; m++) addEvent(w, long, T0 + m * 60_000, T0 + m * 60_000, 401, false);
    expect(windowRequests(w, long, T0 + 4 * 60_000)).toBe(5);
    expect(windowRequests(w, long, T0 + 6 * 60_000)).toBe(3);
    expect(w.counts.length).toBe(60);
  });
});

describe('WindowTable', () => {
  const shape = windowShape(1000, 10);

  it('evicts the value counted least recently when full, and counts evictions', () => {
    const table = new WindowTable(shape, 3);
    addEvent(table.windowFor(1, T0), shape, T0, T0, 200, false);
    addEvent(table.windowFor(2, T0 + 100), shape, T0 + 100, T0 + 100, 200, false);
    addEvent(table.windowFor(3, T0 + 200), shape, T0 + 200, T0 + 200, 200, false);
    // 1 is counted again: 2 is now the idlest.
    addEvent(table.windowFor(1, T0 + 300), shape, T0 + 300, T0 + 300, 200, false);
    addEvent(table.windowFor(4, T0 + 400), shape, T0 + 400, T0 + 400, 200, false);
    expect(table.size).toBe(3);
    expect(table.evictions).toBe(1);
    expect(table.get(2)).toBeUndefined();
    expect([...table.entries()].map(([v]) => v).sort()).toEqual([1, 3, 4]);
  });

  it('stays bounded under a flood of distinct values', () => {
    const table = new WindowTable(shape, 100);
    for (let v = 1; v <= 100_000; v++) addEvent(table.windowFor(v, T0 + v), shape, T0 + v, T0 + v, 200, false);
    expect(table.size).toBe(100);
    expect(table.evictions).toBe(100_000 - 100);
  });

  it('prunes values whose window emptied', () => {
    const table = new WindowTable(shape, 10);
    addEvent(table.windowFor(1, T0), shape, T0, T0, 200, false);
    addEvent(table.windowFor(2, T0 + 800), shape, T0 + 800, T0 + 800, 200, false);
    expect(table.prune(T0 + 1200)).toBe(1);
    expect(table.get(1)).toBeUndefined();
    expect(table.get(2)).toBeDefined();
  });
});
