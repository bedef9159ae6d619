import { describe, expect, it } from 'vitest';
import { statusRows, type StatsSnapshot } from '../stats/rates.js';
import { renderRollout, renderStatus } from './status.js';

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

  it('shows a rollout under the title: the version of each cohort and the share', () => {
    const rollout = {
      id: '0123456789abcdef',
      status: 'running',
      baseline: 3,
      percent: 10,
      step: 1,
      steps: [{}, {}, {}],
      resources: ['orders'],
      note: 'step 2 of 3',
    };
    const lines = renderStatus('http://x', prev, cur, 2, rollout).split('\n');
    expect(lines[1]).toBe('rollout 01234567 running: baseline v3 / candidate 10% of keys of orders  step 2/3  (step 2 of 3)');
    expect(lines[3]).toMatch(/^RESOURCE/);
    expect(renderRollout({ ...rollout, status: 'rolled_back', note: 'orders: too many rejections' })).toBe(
      'rollout 01234567 rolled_back: v3 -> not applied  (orders: too many rejections)',
    );
    expect(renderRollout({ ...rollout, status: 'completed', version: 4 })).toMatch(/completed: v3 -> v4/);
    expect(renderRollout(null)).toBeUndefined();
  });
});
