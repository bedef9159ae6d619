import { describe, expect, it } from 'vitest';
import { DeliveryDelay } from './delivery-delay.js';

describe('DeliveryDelay', () => {
  it('answers the fallback until it has seen a few delays, then their 90th percentile', () => {
    const d = new DeliveryDelay(1000);
    d.record(800);
    d.record(900);
    d.record(850);
    expect(d.estimate()).toBe(1000);
    for (let i = 0; i < 7; i++) d.record(100 * i);
    // 10 samples: 0..600, 800, 850, 900 -> the 9th smallest.
    expect(d.estimate()).toBe(900);
  });

  it('ignores impossible delays and keeps only the newest samples', () => {
    const d = new DeliveryDelay(1000);
    d.record(-5);
    d.record(Number.NaN);
    d.record(120_000);
    for (let i = 0; i < 4; i++) d.record(10);
    expect(d.estimate()).toBe(10);
    for (let i = 0; i < DeliveryDelay.SAMPLES; i++) d.record(500);
    expect(d.estimate()).toBe(500);
  });
});
