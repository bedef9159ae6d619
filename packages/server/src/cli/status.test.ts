import { describe, expect, it } from 'vitest';
import { statusRows, type StatsSnapshot } from '../stats/rates.js';
import { clockSkewSummary, type ClockSkewView } from '../stats/clock.js';
import { healthSummary, type HealthView } from '../stats/health.js';
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
    expect(statusRows(prev, cur, 10).map((x) => [x.resource, x.rate, x.deniedRate])).toEqual([
      ['b', 10, 5],
      ['a', 10, 0],
      ['c', 2, 0],
    ]);
    expect(statusRows(prev, cur, 1).map((x) => x.resource)).toEqual(['b']);
  });

  it('labels every column with its unit and period: rates per second, shares since start', () => {
    const text = renderStatus('http://x', prev, cur, 2);
    const lines = text.split('\n');
    expect(lines[0]).toContain('rules v3');
    expect(lines[0]).toMatch(/\(rates per second over the last 2\.0 s\)$/);
    expect(lines[1]).toBe('health: not reported by this server');
    expect(lines[3]).toMatch(
      /^RESOURCE\s+ALLOWED\/s\s+DENIED\/s\s+SHADOW DENIED\/s\s+LIMIT\s+REMAINING\s+DENIED % SINCE START\s+SHADOW DENIED % SINCE START$/,
    );
    // b: 10 allowed and 10 denied in 2 s; 60 of its 170 decisions since start were denied.
    expect(lines[4]).toMatch(/^b\s+5\.00\s+5\.00\s+0\.00\s+10\s+5\s+35\.3%\s+0\.0%$/);
    expect(lines).toHaveLength(6);
    expect(renderStatus('http://x', prev, { ...cur, resources: [] }, 2)).toContain('(no decisions yet)');
  });

  it('shows shadow-mode denials beside the denials', () => {
    // A resource in shadow mode: every decision admitted, 30 of the last 40 only because of it.
    const shadowed = (allowed: number, shadowDenied: number) => ({ ...r('s', allowed, 0), shadowDenied });
    const lines = renderStatus(
      'http://x',
      { at: 0, version: 1, resources: [shadowed(10, 5)] },
      { at: 2000, version: 1, resources: [shadowed(50, 35)] },
      5,
    ).split('\n');
    expect(lines[4]).toMatch(/^s\s+20\.0\s+0\.00\s+15\.0\s+10\s+5\s+0\.0%\s+70\.0%$/);
  });

  it('opens with the health line: the store, what answers while it is away, the fallback, the clients, the p99', () => {
    const health: HealthView = {
      store: 'redis',
      address: '10.0.0.5:6379',
      reachable: true,
      policy: 'local',
      policies: "the 'local' policy ('closed' for api:pay)",
      fallbackDecisions: 0,
      clientsSeen: 3,
      decisionP99Seconds: 0.00123,
      decisionP99WindowSeconds: 60,
    };
    const line = (h: HealthView) => renderStatus('http://x', prev, { ...cur, health: h }, 2).split('\n')[1];
    expect(line(health)).toBe(
      'store redis at 10.0.0.5:6379: reachable  |  fallback decisions since start: 0  |  live clients: 3  |  p99 decision latency (last 60 s): 1.2 ms',
    );
    const { decisionP99Seconds: _, ...unmeasured } = health;
    expect(
      line({
        ...unmeasured,
        reachable: false,
        unreachableForMs: 3200,
        reason: 'ECONNREFUSED 10.0.0.5:6379',
        fallbackDecisions: 427,
      }),
    ).toBe(
      "store redis at 10.0.0.5:6379: UNREACHABLE for 3.2 s (ECONNREFUSED 10.0.0.5:6379), deciding by the 'local' policy ('closed' for api:pay)" +
        '  |  fallback decisions since start: 427  |  live clients: 3  |  p99 decision latency (last 60 s): no decisions',
    );
    // A server that does not measure it sends neither the p99 nor its window.
    const { decisionP99WindowSeconds: __, ...older } = unmeasured;
    expect(line(older)).toMatch(/ {2}\| {2}p99 decision latency: not measured$/);
    expect(healthSummary({ ...health, reachable: false }).state).toBe('degraded');
    expect(healthSummary(health).state).toBe('ok');
    expect(healthSummary(undefined).state).toBe('unknown');
  });

  it('lists the adaptive limits under the resources', () => {
    const adaptive = [
      {
        resource: 'api:pay',
        policy: 'demand',
        min: 50,
        max: 500,
        limit: 120,
        windowMs: 1000,
        lastMoveAt: '2026-12-01T10:00:00.000Z',
        deciding: true,
      },
      { resource: 'db:orders', policy: 'aimd', min: 10, max: 90, limit: 40, windowMs: 60_000, deciding: false },
      // The store did not say when it last moved (it is away): unknown, not "never".
      {
        resource: 'db:users',
        policy: 'aimd',
        min: 10,
        max: 90,
        limit: 40,
        windowMs: 500,
        lastMoveUnknown: true,
        deciding: false,
      },
    ] as const;
    const lines = renderStatus('http://x', prev, { ...cur, adaptive }, 2).split('\n');
    expect(lines.slice(-4)).toEqual([
      'ADAPTIVE   POLICY  LIMIT  MIN  MAX  WINDOW                 LAST MOVE',
      'api:pay    demand    120   50  500      1s  2026-12-01T10:00:00.000Z',
      'db:orders  aimd       40   10   90     60s                         -',
      'db:users   aimd       40   10   90    0.5s                         ?',
    ]);
    expect(renderStatus('http://x', prev, cur, 2)).not.toContain('ADAPTIVE');
  });

  it('shows the clock skew under the table, flagged when over the threshold', () => {
    const measured = {
      store: 'redis' as const,
      measured: true,
      offsetMs: -5000.4,
      uncertaintyMs: 0.6,
      rttMs: 1.2,
      skewed: true,
      thresholdMs: 1000,
      samples: 3,
      failures: 0,
      warnings: 1,
      lastSampleAt: 1,
    };
    const lines = renderStatus('http://x', prev, { ...cur, clockSkew: measured }, 2).split('\n');
    expect(lines[3]).toMatch(/^RESOURCE/);
    expect(lines.slice(-2)).toEqual(['', 'clock: 5000 ms ahead of redis (± 1 ms)  OVER 1000 ms']);
    const views: [ClockSkewView | undefined, string, string][] = [
      [{ ...measured, offsetMs: 12.2, skewed: false }, 'clock: 12 ms behind redis (± 1 ms)', 'ok'],
      [{ ...measured, offsetMs: 0.3, skewed: false }, 'clock: in step with redis (± 1 ms)', 'ok'],
      [{ ...measured, measured: false, failures: 2 }, 'clock: not measured against redis yet, 2 readings failed', 'unknown'],
      [{ store: 'embedded', thresholdMs: 1000 }, "clock: embedded store (the server's clock is the store's)", 'ok'],
      [undefined, 'clock: not reported by this server', 'unknown'],
    ];
    for (const [view, text, state] of views) expect(clockSkewSummary(view)).toEqual({ text, state });
  });

  it('lists fleet-wide breakers under the resources', () => {
    const breakers = {
      breakers: [
        {
          resource: 'db',
          state: 'open',
          policy: { windowMs: 10_000, halfOpenProbes: 3 },
          window: { calls: 40, failures: 31, slow: 2 },
        },
        { resource: 'api:payments', state: 'closed', policy: { windowMs: 5000, halfOpenProbes: 1 } },
      ],
    };
    const lines = renderStatus('http://x', prev, cur, 2, breakers).split('\n');
    expect(lines.slice(6)).toEqual([
      '',
      'BREAKER       STATE   CALLS  FAILED  SLOW  WINDOW  PROBES',
      'db            OPEN       40      31     2     10s       3',
      'api:payments  CLOSED      ?       ?     ?      5s       1',
    ]);
    expect(renderStatus('http://x', prev, cur, 2, { breakers: [] }).split('\n')).toHaveLength(6);
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
    const lines = renderStatus('http://x', prev, cur, 2, undefined, rollout).split('\n');
    expect(lines[2]).toBe('rollout 01234567 running: baseline v3 / candidate 10% of keys of orders  step 2/3  (step 2 of 3)');
    expect(lines[4]).toMatch(/^RESOURCE/);
    expect(renderRollout({ ...rollout, status: 'rolled_back', note: 'orders: too many rejections' })).toBe(
      'rollout 01234567 rolled_back: v3 -> not applied  (orders: too many rejections)',
    );
    expect(renderRollout({ ...rollout, status: 'completed', version: 4 })).toMatch(/completed: v3 -> v4/);
    expect(renderRollout(null)).toBeUndefined();
  });
});

describe('status view of priority tiers', () => {
  const tiered = (allowed: number, denied: number, boosted: number, shadowDenied = 0) => ({
    resource: 'payments',
    allowed: allowed + 10,
    denied,
    shadowDenied,
    limit: 10,
    remaining: 0,
    boosted,
    tiers: [
      { tier: 'vip', allowed, denied, boosted, shadowDenied },
      { tier: 'standard', allowed: 10, denied: 0, boosted: 0, shadowDenied: 0 },
    ],
  });

  it('adds a block per tier with its rates (shadow denials too) and boosts since start, only when there are tiers', () => {
    const prev: StatsSnapshot = { at: 1000, version: 1, resources: [tiered(2, 0, 0)] };
    const cur: StatsSnapshot = { at: 3000, version: 1, resources: [tiered(8, 4, 3, 2)] };
    const lines = renderStatus('http://x', prev, cur, 5).split('\n');
    const at = lines.findIndex((l) => l.startsWith('RESOURCE  TIER'));
    expect(at).toBeGreaterThan(3);
    expect(lines[at]).toMatch(/^RESOURCE\s+TIER\s+ALLOWED\/s\s+DENIED\/s\s+SHADOW DENIED\/s\s+BOOSTED SINCE START$/);
    expect(lines[at + 1]).toMatch(/^payments\s+vip\s+3\.00\s+2\.00\s+1\.00\s+3$/);
    expect(lines[at + 2]).toMatch(/^payments\s+standard\s+0\.00\s+0\.00\s+0\.00\s+0$/);
    expect(renderStatus('http://x', prev, { ...cur, resources: [r('a', 1, 0)] }, 5)).not.toContain('TIER');
  });
});
