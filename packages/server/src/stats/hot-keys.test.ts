import { describe, expect, it } from 'vitest';
import { renderStatus } from '../cli/status.js';
import { hotKeyLines, shownKey } from './hot-keys.js';
import type { StatsSnapshot } from './rates.js';

const report = {
  resource: 'api:payments',
  windowMs: 10_000,
  calls: 12_000,
  mitigated: 1,
  keys: [
    { key: 'channel-7', calls: 9000, error: 0, rate: 900, share: 0.75, mitigation: 'lease' as const },
    { key: 'channel-2', calls: 1200, error: 40, rate: 120, share: 0.1, mitigation: undefined },
    { key: 'channel-3', calls: 100, error: 0, rate: 10, share: 0.0083, mitigation: undefined },
  ],
};

describe('hot keys in the status view', () => {
  it('lists the heaviest keys of each resource with rate, share, error and mitigation', () => {
    expect(hotKeyLines([report], 2)).toEqual([
      '',
      'HOT KEYS',
      'api:payments  12000 calls in 10 s, 1 mitigated',
      '  channel-7  900.0/s  75.0%       lease',
      '  channel-2  120.0/s  10.0%  ±40',
    ]);
    expect(hotKeyLines([], 2)).toEqual([]);
    expect(hotKeyLines(undefined, 2)).toEqual([]);
  });

  it('comes after the resources table, only when the server reports hot keys', () => {
    const snap: StatsSnapshot = { at: 1000, version: 1, resources: [] };
    expect(renderStatus('http://x', snap, snap, 5)).not.toContain('HOT KEYS');
    expect(renderStatus('http://x', snap, { ...snap, at: 2000, hotKeys: [report] }, 5)).toContain('  channel-3   10.0/s   0.8%');
  });

  it('never prints a key that could drive the terminal, and cuts long ones', () => {
    expect(shownKey('plain-key')).toBe('plain-key');
    expect(shownKey('\u001b[2Jboom')).toBe('"\\u001b[2Jboom"');
    expect(shownKey('')).toBe('""');
    const long = shownKey('x'.repeat(300));
    expect(long).toHaveLength(48);
    expect(long.endsWith('…')).toBe(true);
  });
});
