import { describe, expect, it } from 'vitest';
import { dueTime, ExpiryWheel } from './expiry-wheel.js';
import { KeyTable } from './key-table.js';
import { compileLimits } from '../shared/policy.js';

const limits = compileLimits({ algorithm: 'gcra', limit: 1, windowMs: 1000 });
const state = [[limits[0]!.code, 0]];

/** Writes `key` as live until `expiresAt` (its state is opaque to the table). */
function put(table: KeyTable, key: string, expiresAt: number, now: number): boolean {
  return table.write(key, limits, state, expiresAt, now);
}

describe('KeyTable', () => {
  it('never removes a live key to make room: a new key is refused while every key held counts', () => {
    const table = new KeyTable(100);
    for (let i = 0; i < 100; i++) put(table, `live${i}`, 10_000, 0);
    let refused = 0;
    for (let i = 0; i < 1000; i++) if (!table.makeRoom(`new${i}`, 5000)) refused++;
    expect(refused).toBe(1000);
    // Written with its limits, a new key's state joins the summary instead of taking a slot.
    expect(put(table, 'late', 10_000, 5000)).toBe(true);
    expect(table.size).toBe(100);
    expect(table.holds('late')).toBe(false);
    expect({ evicted: table.evicted, refused: table.refused, summarized: table.summarized }).toEqual({
      evicted: 0,
      refused: 1000,
      summarized: 1,
    });
    for (let i = 0; i < 100; i++) expect(table.read(`live${i}`, limits, 5000)).toBeDefined();
    // A held key is always written, full or not.
    expect(put(table, 'live7', 20_000, 5000)).toBe(true);
  });

  it("drops an ended entry's bookings with it: a later write does not bring them back", () => {
    const table = new KeyTable(100);
    const ledger = {
      policy: 'p',
      bookings: [{ id: 'b', token: 't', cost: 3, start: 0, end: 60 }],
      newest: 'b',
      marks: [undefined],
    };
    table.write('k', limits, state, 61, 0, ledger);
    expect(table.read('k', limits, 50)?.ledger).toEqual(ledger);
    // Ended at 61, still in the table (nothing swept it): a write at 70 starts afresh.
    table.write('k', limits, state, 200, 70);
    expect(table.read('k', limits, 70)?.ledger).toBeUndefined();
    // While the entry lives, a write that names no ledger keeps it.
    table.write('j', limits, state, 100, 0, ledger);
    table.write('j', limits, state, 150, 50);
    expect(table.read('j', limits, 50)?.ledger).toEqual(ledger);
  });

  it('makes room by removing a key at rest, and says when room is expected while there is none', () => {
    const table = new KeyTable(3);
    put(table, 'soon', 1000, 0);
    put(table, 'late1', 60_000, 0);
    put(table, 'late2', 60_000, 0);
    expect(table.makeRoom('x', 999)).toBe(false);
    // Due within a sixteenth of its lifetime: 1000 ms rounded up to 64 ms.
    expect(table.roomAfterMs(999)).toBeGreaterThanOrEqual(1);
    expect(table.roomAfterMs(999)).toBeLessThanOrEqual(1 + 64);
    expect(put(table, 'x', 30_000, 1100)).toBe(true);
    expect({ size: table.size, evicted: table.evicted }).toEqual({ size: 3, evicted: 1 });
    expect(table.read('soon', limits, 1100)).toBeUndefined();
    expect(table.read('late1', limits, 1100)).toBeDefined();
  });

  it('follows rewrites: a key extended after it was filed is filed again, not removed', () => {
    const table = new KeyTable(2);
    put(table, 'hot', 1000, 0);
    put(table, 'cold', 5000, 0);
    // The hot key is written again and again, each time living longer.
    for (let t = 100; t <= 5000; t += 100) put(table, 'hot', t + 1000, t);
    expect(table.makeRoom('new', 5000)).toBe(false);
    // 'cold' is due by 5000 + 5000 / 16.
    expect(table.makeRoom('new', 5400)).toBe(true);
    expect(table.read('hot', limits, 5400)).toBeDefined();
    expect(table.read('cold', limits, 5400)).toBeUndefined();
  });

  it('reads a key at rest as absent and reuses its slot without taking room', () => {
    const table = new KeyTable(1);
    put(table, 'a', 100, 0);
    expect(table.read('a', limits, 100)).toBeUndefined();
    expect(put(table, 'a', 500, 200)).toBe(true);
    expect(table.read('a', limits, 300)).toBeDefined();
    expect(table.refused + table.evicted).toBe(0);
  });

  it('sweeps keys at rest in bounded batches and keeps live ones', () => {
    const table = new KeyTable(10_000);
    for (let i = 0; i < 5000; i++) put(table, `short${i}`, 100 + (i % 50), 0);
    for (let i = 0; i < 1000; i++) put(table, `long${i}`, 100_000, 0);
    expect(table.sweep(50, 10_000)).toBe(0);
    expect(table.sweep(1000, 2000)).toBe(2000);
    expect(table.sweep(1000, 10_000)).toBe(3000);
    expect(table.size).toBe(1000);
    expect(table.expired).toBe(5000);
    expect(table.sweep(99_999, 10_000)).toBe(0);
    expect(table.sweep(100_000 + 100_000 / 16, 10_000)).toBe(1000);
  });

  it('refuses every key of a flood twenty times its size while it is full of live keys', () => {
    const table = new KeyTable(10_000);
    for (let i = 0; i < 10_000; i++) put(table, `live${i}`, 3_600_000, 0);
    let refused = 0;
    for (let i = 0; i < 200_000; i++) if (!table.makeRoom(`flood${i}`, 1000)) refused++;
    expect(refused).toBe(200_000);
    let held = 0;
    for (let i = 0; i < 10_000; i++) if (table.read(`live${i}`, limits, 1000) !== undefined) held++;
    expect(held).toBe(10_000);
  });

  it('keeps making room at a full table of keys at rest, one key removed per new key', () => {
    const table = new KeyTable(20_000);
    let now = 0;
    let written = 0;
    for (let round = 0; round < 20; round++) {
      for (let i = 0; i < 20_000; i++) if (put(table, `r${round}k${i}`, now + 1000, now)) written++;
      now += 2000;
    }
    expect(written).toBe(20 * 20_000);
    expect(table.size).toBe(20_000);
    expect(table.evicted).toBe(19 * 20_000);
    expect(table.refused).toBe(0);
  });
  it("keeps a live key's state however many policies pass through, and frees the numbers of those gone", () => {
    const table = new KeyTable(100);
    const mine = [[limits[0]!.code, 7]];
    table.write('held', limits, mine, 60_000, 0);
    // A client making a new policy per call (an Envoy limit override each time), its keys at rest soon.
    for (let i = 0; i < 25_000; i++) {
      const own = compileLimits({ algorithm: 'gcra', limit: 1 + i, windowMs: 1000 });
      table.write(`flood${i}`, own, [[own[0]!.code, 0]], i + 1, i);
      expect(table.size).toBeLessThanOrEqual(100);
    }
    expect(table.read('held', limits, 25_000)).toEqual({ expiresAt: 60_000, states: mine });
    expect(table.policies).toBeLessThanOrEqual(100);
    // Rewriting a key under one policy keeps one number.
    for (let i = 0; i < 10; i++) table.write('held', limits, mine, 60_000, 25_000);
    table.sweep(70_000, 1000);
    expect(table.size).toBe(0);
    expect(table.policies).toBe(0);
  });
});

describe('ExpiryWheel', () => {
  it('hands out keys in due order, only once due', () => {
    const wheel = new ExpiryWheel();
    wheel.add('c', 3000, 0);
    wheel.add('a', 10, 0);
    wheel.add('b', 500, 0);
    expect(wheel.takeDue(5)).toBeUndefined();
    const taken: string[] = [];
    for (let k = wheel.takeDue(10_000); k !== undefined; k = wheel.takeDue(10_000)) taken.push(k);
    expect(taken).toEqual(['a', 'b', 'c']);
    expect(wheel.nextDue()).toBeUndefined();
  });

  it('buckets a state within a sixteenth of its lifetime after it comes to rest', () => {
    for (const [expiresAt, now] of [
      [1, 0],
      [1000, 0],
      [3_600_000, 0],
      [1_700_000_123_456, 1_700_000_000_000],
    ] as const) {
      const due = dueTime(expiresAt, now);
      expect(due).toBeGreaterThanOrEqual(expiresAt);
      expect(due - expiresAt).toBeLessThanOrEqual(Math.max(1, (expiresAt - now) / 16));
    }
  });
});
