import { describe, expect, it } from 'vitest';
import { hashTag, keyNames, slotOf } from './keys.js';

const odd = ['', 'plain', '}', '{', '{}', '}{', '%', '%25', '%7D', 'a}b{c', 'ünï', ' ', 'x'.repeat(256)];

describe('key names', () => {
  it('put a key and its permit keys in one slot whatever the key contains', () => {
    for (const key of odd) {
      const n = keyNames('sluice:', key);
      expect(slotOf(n.permits), key).toBe(slotOf(n.state));
      expect(slotOf(n.costs), key).toBe(slotOf(n.state));
    }
  });

  it('hash on the key alone, so distinct keys spread over slots', () => {
    const slots = new Set(Array.from({ length: 200 }, (_, i) => slotOf(keyNames('p:', `k${i}`).state)));
    expect(slots.size).toBeGreaterThan(150);
    expect(slotOf(keyNames('a:', 'same').state)).toBe(slotOf(keyNames('b:', 'same').state));
  });

  it('map distinct keys to distinct names', () => {
    const names = odd.map((k) => keyNames('sluice:', k).state);
    expect(new Set(names).size).toBe(odd.length);
  });

  it('escape only what would end the tag early', () => {
    expect(hashTag('tenant-a')).toBe('{tenant-a}');
    expect(hashTag('')).toBe('{%}');
    expect(hashTag('a}b')).toBe('{a%7Db}');
    expect(hashTag('50%')).toBe('{50%25}');
    expect(keyNames('sluice:', 'k')).toEqual({ state: 'sluice:{k}', permits: 'sluice:{k}:l', costs: 'sluice:{k}:c' });
  });
});
