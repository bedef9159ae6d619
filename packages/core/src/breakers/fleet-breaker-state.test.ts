import { describe, expect, it } from 'vitest';
import { newFleetBreakerRecord, stepFleetBreaker, tallyRange, type FleetBreakerPolicy } from './fleet-breaker-state.js';

const policy: FleetBreakerPolicy = {
  windowMs: 1000,
  buckets: 10,
  minimumCalls: 10,
  failureRateThreshold: 0.5,
  slowCallRateThreshold: 1,
  openDurationMs: 1000,
  halfOpenProbes: 2,
};
const calls = (n: number, failures = 0, slow = 0) => ({ calls: n, failures, slow, totalDurationMs: n });

describe('stepFleetBreaker', () => {
  it('opens once enough calls fail, whoever reported them', () => {
    const r = newFleetBreakerRecord(policy);
    expect(stepFleetBreaker(r, policy, 0, calls(5, 2)).state).toBe('closed');
    expect(stepFleetBreaker(r, policy, 10, calls(4, 2)).state).toBe('closed'); // 9 calls: below the minimum
    expect(stepFleetBreaker(r, policy, 20, calls(1, 1))).toEqual({ state: 'open', retryAfterMs: 1000, probe: false });
  });

  it('forgets calls that slid out of the window', () => {
    const r = newFleetBreakerRecord(policy);
    stepFleetBreaker(r, policy, 0, calls(9, 9));
    expect(stepFleetBreaker(r, policy, 1500, calls(1, 1)).state).toBe('closed');
  });

  it('opens on slow calls', () => {
    const r = newFleetBreakerRecord({ ...policy, slowCallRateThreshold: 0.5 });
    expect(stepFleetBreaker(r, { ...policy, slowCallRateThreshold: 0.5 }, 0, calls(10, 0, 5)).state).toBe('open');
  });

  it('hands out at most halfOpenProbes permits per half-open period, then closes on their success', () => {
    const r = newFleetBreakerRecord(policy);
    stepFleetBreaker(r, policy, 0, calls(10, 10));
    expect(stepFleetBreaker(r, policy, 500, undefined, true)).toEqual({ state: 'open', retryAfterMs: 500, probe: false });
    const granted = [1000, 1001, 1002, 1003].map((t) => stepFleetBreaker(r, policy, t, undefined, true).probe);
    expect(granted).toEqual([true, true, false, false]);
    expect(stepFleetBreaker(r, policy, 1100, calls(1)).state).toBe('half_open');
    expect(stepFleetBreaker(r, policy, 1200, calls(1)).state).toBe('closed');
    // Closing starts a fresh window: the failures before it no longer count.
    expect(stepFleetBreaker(r, policy, 1300, calls(1, 1)).state).toBe('closed');
  });

  it('re-opens on a failed probe', () => {
    const r = newFleetBreakerRecord(policy);
    stepFleetBreaker(r, policy, 0, calls(10, 10));
    expect(stepFleetBreaker(r, policy, 1000, undefined, true).probe).toBe(true);
    expect(stepFleetBreaker(r, policy, 1010, calls(1, 1))).toEqual({ state: 'open', retryAfterMs: 1000, probe: false });
  });

  it('writes off probes whose outcome never came after an open duration', () => {
    const r = newFleetBreakerRecord(policy);
    stepFleetBreaker(r, policy, 0, calls(10, 10));
    stepFleetBreaker(r, policy, 1000, undefined, true);
    stepFleetBreaker(r, policy, 1000, undefined, true);
    expect(stepFleetBreaker(r, policy, 1500, undefined, true)).toEqual({ state: 'half_open', retryAfterMs: 500, probe: false });
    expect(stepFleetBreaker(r, policy, 2000, undefined, true).probe).toBe(true);
  });
});

describe('tallyRange', () => {
  it('ends with the bucket in progress, or with complete the last one that has ended', () => {
    expect(tallyRange(10_300, 1000)).toEqual([10, 10]);
    expect(tallyRange(10_300, 1000, true)).toEqual([9, 9]);
    // Sub-second windows still read one whole bucket; longer ones ceil(window / 1 s) of them.
    expect(tallyRange(10_300, 500, true)).toEqual([9, 9]);
    expect(tallyRange(10_300, 2500, true)).toEqual([7, 9]);
  });
});
