import { describe, expect, it } from 'vitest';
import { CircuitBreaker } from './circuit-breaker.js';
import { ManualClock } from '../shared/clock.js';

function breaker(extra = {}) {
  const clock = new ManualClock(0);
  const transitions: string[] = [];
  const b = new CircuitBreaker({
    clock,
    minimumCalls: 10,
    failureRateThreshold: 0.5,
    openDurationMs: 1000,
    halfOpenProbes: 2,
    ...extra,
  });
  b.onStateChange = (from, to) => transitions.push(`${from}->${to}`);
  return { clock, b, transitions };
}

describe('CircuitBreaker', () => {
  it('stays closed below the minimum number of calls', () => {
    const { b } = breaker();
    for (let i = 0; i < 9; i++) b.record(false, 1);
    expect(b.state).toBe('closed');
  });

  it('opens on the failure ratio, rejects fast, then half-opens and closes after good probes', () => {
    const { clock, b, transitions } = breaker();
    for (let i = 0; i < 5; i++) b.record(true, 1);
    for (let i = 0; i < 5; i++) b.record(false, 1);
    expect(b.state).toBe('open');
    clock.advance(400);
    expect(b.tryPass()).toEqual({ allowed: false, state: 'open', retryAfterMs: 600 });
    clock.advance(600);
    expect(b.tryPass().allowed).toBe(true);
    expect(b.tryPass().allowed).toBe(true);
    expect(b.tryPass().allowed).toBe(false);
    b.record(true, 1);
    b.record(true, 1);
    expect(b.state).toBe('closed');
    expect(transitions).toEqual(['closed->open', 'open->half_open', 'half_open->closed']);
  });

  it('re-opens when a probe fails', () => {
    const { clock, b } = breaker();
    for (let i = 0; i < 10; i++) b.record(false, 1);
    clock.advance(1000);
    expect(b.tryPass().allowed).toBe(true);
    b.record(false, 1);
    expect(b.state).toBe('open');
  });

  it('opens on the slow-call ratio', () => {
    const { b } = breaker({ slowCallDurationMs: 100, slowCallRateThreshold: 0.8 });
    for (let i = 0; i < 2; i++) b.record(true, 5);
    for (let i = 0; i < 8; i++) b.record(true, 150);
    expect(b.state).toBe('open');
  });

  it('forgets calls that slid out of the window', () => {
    const { clock, b } = breaker({ windowMs: 1000, buckets: 10 });
    for (let i = 0; i < 9; i++) b.record(false, 1);
    clock.advance(1100);
    b.record(false, 1);
    expect(b.stats().calls).toBe(1);
    expect(b.state).toBe('closed');
  });

  it('lets new probes through when earlier ones never reported', () => {
    const { clock, b } = breaker();
    for (let i = 0; i < 10; i++) b.record(false, 1);
    clock.advance(1000);
    b.tryPass();
    b.tryPass();
    expect(b.tryPass().allowed).toBe(false);
    clock.advance(1000);
    expect(b.tryPass().allowed).toBe(true);
  });

  it('rejects bad options', () => {
    expect(() => new CircuitBreaker({ failureRateThreshold: 2 })).toThrow(/failureRateThreshold/);
  });
});
