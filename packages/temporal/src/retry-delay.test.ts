import { describe, expect, it } from 'vitest';
import { bookedRetryDelayMs, retryDelayMs } from './retry-delay.js';

describe('retryDelayMs', () => {
  it('waits the retry-after rounded up, at least the minimum, plus its share of jitter', () => {
    const none = { minMs: 100, jitter: 0.2, random: () => 0 };
    expect(retryDelayMs(1234.2, none)).toBe(1235);
    expect(retryDelayMs(0, none)).toBe(100);
    // The jitter is a fraction of the wait, after the minimum applied.
    expect(retryDelayMs(2000, { ...none, random: () => 0.5 })).toBe(2200);
    expect(retryDelayMs(10, { ...none, random: () => 0.5 })).toBe(110);
    expect(retryDelayMs(2000, { ...none, jitter: 0, random: () => 0.99 })).toBe(2000);
  });

  it('draws one number per delay', () => {
    let draws = 0;
    retryDelayMs(500, { minMs: 0, jitter: 0.2, random: () => (draws++, 0.1) });
    expect(draws).toBe(1);
  });
});

describe('bookedRetryDelayMs', () => {
  it('comes back its lead before the slot, never sooner than the minimum, without jitter', () => {
    expect(bookedRetryDelayMs(5000, 300, 100)).toBe(4700);
    expect(bookedRetryDelayMs(5000.5, 300.2, 100)).toBe(4701);
    expect(bookedRetryDelayMs(350, 300, 100)).toBe(100);
  });
});
