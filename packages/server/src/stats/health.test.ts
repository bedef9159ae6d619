import { describe, expect, it } from 'vitest';
import { healthView } from './health.js';

const store = {
  store: 'redis',
  address: '10.0.0.5:6379',
  reachable: true,
  policy: 'local' as const,
  policies: "the 'local' policy",
  fallbackDecisions: 4,
};

describe('healthView', () => {
  it('adds the clients seen, and the p99 only when the latency source has one', () => {
    expect(healthView(store, 3)).toEqual({ ...store, clientsSeen: 3 });
    expect(healthView(store, 3, () => undefined)).toEqual({ ...store, clientsSeen: 3 });
    expect(healthView(store, 3, () => ({ p99Seconds: Number.NaN }))).toEqual({ ...store, clientsSeen: 3 });
    expect(healthView(store, 0, () => ({ p99Seconds: 0.004 }))).toEqual({ ...store, clientsSeen: 0, decisionP99Seconds: 0.004 });
  });
});
