import { describe, expect, it } from 'vitest';
import { healthFigures, healthSummary, healthView } from './health.js';

const store = {
  store: 'redis',
  address: '10.0.0.5:6379',
  reachable: true,
  policy: 'local' as const,
  policies: "the 'local' policy",
  fallbackDecisions: 4,
};

describe('healthView', () => {
  it('adds the clients seen, the window when measured, and the p99 only when the window has one', () => {
    expect(healthView(store, 3)).toEqual({ ...store, clientsSeen: 3 });
    expect(healthView(store, 3, () => undefined)).toEqual({ ...store, clientsSeen: 3 });
    expect(healthView(store, 3, () => ({ windowSeconds: 60 }))).toEqual({
      ...store,
      clientsSeen: 3,
      decisionP99WindowSeconds: 60,
    });
    expect(healthView(store, 3, () => ({ windowSeconds: 60, p99Seconds: Number.NaN }))).toEqual({
      ...store,
      clientsSeen: 3,
      decisionP99WindowSeconds: 60,
    });
    expect(healthView(store, 0, () => ({ windowSeconds: 60, p99Seconds: 0.004 }))).toEqual({
      ...store,
      clientsSeen: 0,
      decisionP99Seconds: 0.004,
      decisionP99WindowSeconds: 60,
    });
  });
});

describe('healthSummary and healthFigures', () => {
  it('label every figure with its period, the p99 with its window', () => {
    const view = healthView(store, 3, () => ({ windowSeconds: 60, p99Seconds: 0.0012 }));
    expect(healthSummary(view)).toEqual({
      text:
        'store redis at 10.0.0.5:6379: reachable  |  fallback decisions since start: 4  |  ' +
        'live clients: 3  |  p99 decision latency (last 60 s): 1.2 ms',
      state: 'ok',
    });
    expect(healthFigures(view).map((f) => [f.name, f.state])).toEqual([
      ['store', 'ok'],
      ['fallback', 'ok'],
      ['clients', 'ok'],
      ['latency', 'ok'],
    ]);
  });

  it('say "no decisions" for a window without any, and "not measured" without a window', () => {
    expect(healthSummary(healthView(store, 0, () => ({ windowSeconds: 60 }))).text).toMatch(
      /\| {2}p99 decision latency \(last 60 s\): no decisions$/,
    );
    expect(healthSummary(healthView(store, 0)).text).toMatch(/\| {2}p99 decision latency: not measured$/);
  });

  it('say for how long, why and by which policy while the store is away, as a degraded state', () => {
    const away = healthView(
      { ...store, reachable: false, unreachableForMs: 3200, reason: 'ECONNREFUSED 10.0.0.5:6379', fallbackDecisions: 427 },
      3,
    );
    const summary = healthSummary(away);
    expect(summary.state).toBe('degraded');
    expect(summary.text).toMatch(
      /^store redis at 10\.0\.0\.5:6379: UNREACHABLE for 3\.2 s \(ECONNREFUSED 10\.0\.0\.5:6379\), deciding by the 'local' policy {2}\| {2}fallback decisions since start: 427 {2}\|/,
    );
    expect(healthFigures(away)[0]).toMatchObject({ name: 'store', state: 'degraded' });
    expect(healthSummary(undefined)).toEqual({ text: 'health: not reported by this server', state: 'unknown' });
  });
});
