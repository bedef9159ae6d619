import { describe, expect, it } from 'vitest';
import { OldestFirst } from './oldest-first.js';
import { Prefilter } from './prefilter.js';

describe('OldestFirst', () => {
  it('takes entries in insertion order, following deletes, moves and entries added after it ran dry', () => {
    const map = new Map<string, number>();
    const oldest = new OldestFirst(map);
    expect(oldest.shift()).toBeUndefined();
    for (const k of ['a', 'b', 'c', 'd']) map.set(k, 0);
    expect(oldest.shift()).toBe('a');
    map.delete('b');
    // 'c' is seen again: it moves to the back.
    map.delete('c');
    map.set('c', 1);
    expect(oldest.peek()).toEqual(['d', 0]);
    map.set('e', 0);
    expect([oldest.shift(), oldest.shift(), oldest.shift(), oldest.shift()]).toEqual(['d', 'c', 'e', undefined]);
    map.set('f', 0);
    expect(oldest.shift()).toBe('f');
    expect(map.size).toBe(0);
  });

  it('notices a peeked entry that moved since', () => {
    const map = new Map([
      ['a', 0],
      ['b', 0],
    ]);
    const oldest = new OldestFirst(map);
    expect(oldest.peek()).toEqual(['a', 0]);
    map.delete('a');
    map.set('a', 5);
    expect(oldest.peek()).toEqual(['b', 0]);
    expect(oldest.shift()).toBe('b');
    expect(oldest.peek()).toEqual(['a', 5]);
  });
});

describe('Prefilter', () => {
  it('stays bounded under a stream of new denied keys, forgetting the oldest first', () => {
    const filter = new Prefilter(100);
    const denied = {
      allowed: false,
      limit: 1,
      remaining: 0,
      retryAfterMs: 60_000,
      resetAfterMs: 60_000,
      reason: 'rate_limited',
      limitId: '0',
      statuses: [],
    } as const;
    for (let i = 0; i < 10_000; i++) filter.learn(`k${i}`, 1, 0, denied);
    expect(filter.size).toBe(100);
    expect(filter.check('k9899', 1, 1)).toBeUndefined();
    expect(filter.check('k9900', 1, 1)).toMatchObject({ allowed: false, source: 'prefilter' });
  });
});
