import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { compileResource, type ResourceConfig } from './resource.js';

const paths = (config: ResourceConfig) => compileResource('r', config, new ManualClock(0)).paths;
const gcra = { algorithm: 'gcra', limit: 10, burst: 4 } as const;

describe('resource paths', () => {
  it('open every path on a plain resource', () => {
    expect(paths(gcra)).toEqual({
      maxCost: 4,
      direct: true,
      sync: 'prefilter',
      leasedByCaller: false,
      reserveRefusal: undefined,
      bookable: true,
      concurrency: false,
    });
    expect(paths({ limits: gcra, prefilter: false }).sync).toBe('none');
  });

  it('send calls the full way when a breaker, shadow mode, a split or a boost pool decides too', () => {
    expect(paths({ limits: gcra, breaker: {} }).direct).toBe(false);
    expect(paths({ limits: gcra, breaker: { scope: 'fleet' } }).direct).toBe(false);
    expect(paths({ limits: gcra, shadow: true }).direct).toBe(false);
    expect(paths({ limits: gcra, split: 2 }).direct).toBe(false);
    expect(paths({ limits: gcra, boost: { limit: 5, tiers: ['core'] } }).direct).toBe(false);
    expect(paths({ limits: gcra, tenants: { '*': { algorithm: 'gcra', limit: 1 } } }).direct).toBe(true);
  });

  it('size one call by the strictest limit, or one sub-key share of it', () => {
    expect(paths({ limits: [gcra, { algorithm: 'fixed-window', limit: 3, id: 'w' }] }).maxCost).toBe(3);
    expect(paths({ limits: gcra, split: 3 }).maxCost).toBe(1);
  });

  it('serve trySync from leases when keys are leased, every key or the hot ones', () => {
    expect(paths({ limits: gcra, lease: true })).toMatchObject({ sync: 'lease', leasedByCaller: true, bookable: false });
    expect(paths({ limits: gcra, lease: true, split: 2 })).toMatchObject({ sync: 'lease', leasedByCaller: false });
    expect(paths({ limits: gcra, hotKeys: { action: 'lease', threshold: { rate: 100 } } })).toMatchObject({
      sync: 'hot-lease',
      leasedByCaller: false,
    });
  });

  it('say why a resource cannot be reserved, as reserve says it', () => {
    expect(paths({ algorithm: 'concurrency', limit: 2 }).reserveRefusal).toBe('concurrency limits cannot be reserved');
    expect(paths({ limits: gcra, split: 2 }).reserveRefusal).toBe('split resources cannot be reserved');
    expect(paths({ limits: gcra, priority: { coreShare: 0.2 } }).reserveRefusal).toBe(
      'resources with a core share cannot be reserved',
    );
    expect(paths({ limits: gcra, boost: { limit: 5, tiers: ['core'] } }).reserveRefusal).toBe(
      'resources with a boost pool cannot be reserved',
    );
  });

  it('book only rate limits on one key that the store alone decides', () => {
    expect(paths({ algorithm: 'concurrency', limit: 2 }).bookable).toBe(false);
    expect(paths({ limits: gcra, split: 2 }).bookable).toBe(false);
    expect(paths({ limits: gcra, shadow: true }).bookable).toBe(false);
    expect(paths({ limits: gcra, boost: { limit: 5, tiers: ['core'] } }).bookable).toBe(false);
    // A core share holds back only for the lower tier's calls: the resource's keys stay bookable.
    expect(paths({ limits: gcra, priority: { coreShare: 0.2 } }).bookable).toBe(true);
  });
});
