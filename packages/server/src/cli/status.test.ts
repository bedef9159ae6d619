import { describe, expect, it } from 'vitest';
import { statusRows, type StatsSnapshot } from '../stats/rates.js';
import { renderStatus } from './status.js';

const r = (resource: string, allowed: number, denied: number, limit = 10, remaining = 5) => ({
  resource,
  allowed,
  denied,
  shadowDenied: 0,
  limit,
  remaining,
});

describe('status view', () => {
  const prev: StatsSnapshot = { at: 1000, version: 3, resources: [r('a', 10, 0), r('b', 100, 50)] };
  const cur: StatsSnapshot = { at: 3000, version: 3, resources: [r('a', 30, 0), r('b', 110, 60), r('c', 4, 0)] };

  it('ranks resources by rate between two snapshots', () => {
    expect(statusRows(prev, cur, 10)).toEqual([
      { resource: 'b', rate: 10, deniedRate: 5, limit: 10, remaining: 5, rejectedShare: 60 / 170 },
      { resource: 'a', rate: 10, deniedRate: 0, limit: 10, remaining: 5, rejectedShare: 0 },
      { resource: 'c', rate: 2, deniedRate: 0, limit: 10, remaining: 5, rejectedShare: 0 },
    ]);
    expect(statusRows(prev, cur, 1).map((x) => x.resource)).toEqual(['b']);
  });

  it('renders a table with a header', () => {
    const text = renderStatus('http://x', prev, cur, 2);
    const lines = text.split('\n');
    expect(lines[0]).toContain('rules v3');
    expect(lines[2]).toMatch(/^RESOURCE\s+RATE\/s\s+DENIED\/s\s+LIMIT\s+REMAINING\s+REJECTED$/);
    expect(lines[3]).toMatch(/^b\s+10\.0\s+5\.00\s+10\s+5\s+35\.3%$/);
    expect(lines).toHaveLength(5);
    expect(renderStatus('http://x', prev, { ...cur, resources: [] }, 2)).toContain('(no decisions yet)');
  });
});

describe('status view of priority tiers', () => {
  const tiered = (allowed: number, denied: number, boosted: number) => ({
    resource: 'payments',
    allowed: allowed + 10,
    denied,
    shadowDenied: 0,
    limit: 10,
    remaining: 0,
    boosted,
    tiers: [
      { tier: 'vip', allowed, denied, boosted },
      { tier: 'standard', allowed: 10, denied: 0, boosted: 0 },
    ],
  });

  it('adds a block per tier with its rates and boosts, only when there are tiers', () => {
    const prev: StatsSnapshot = { at: 1000, version: 1, resources: [tiered(2, 0, 0)] };
    const cur: StatsSnapshot = { at: 3000, version: 1, resources: [tiered(8, 4, 3)] };
    const lines = renderStatus('http://x', prev, cur, 5).split('\n');
    const at = lines.findIndex((l) => l.startsWith('RESOURCE  TIER'));
    expect(at).toBeGreaterThan(3);
    expect(lines[at]).toMatch(/^RESOURCE\s+TIER\s+ALLOWED\/s\s+DENIED\/s\s+BOOSTED$/);
    expect(lines[at + 1]).toMatch(/^payments\s+vip\s+3\.00\s+2\.00\s+3$/);
    expect(lines[at + 2]).toMatch(/^payments\s+standard\s+0\.00\s+0\.00\s+0$/);
  });
});
