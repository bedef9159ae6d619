import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { ErrorCodes } from '../shared/errors.js';
import { Limiter } from './limiter.js';
import type { ResourceOptions } from './resource.js';
import { compilePriority } from './tiers.js';

const minute = 60_000;
const fixed = { algorithm: 'fixed-window', limit: 10, windowMs: minute } as const;
const tiers = [
  { name: 'vip', share: 0.2 },
  { name: 'standard', share: 0.3 },
  { name: 'bulk', share: 0 },
];

async function take(limiter: Limiter, resource: string, n: number, options: { priority?: string; key?: string } = {}) {
  let ok = 0;
  for (let i = 0; i < n; i++) if ((await limiter.try(resource, options)).allowed) ok++;
  return ok;
}

describe('priority tiers', () => {
  it('holds back from each tier the shares of the tiers above it', () => {
    const p = compilePriority({ tiers }, 0, 'p');
    expect(p.tiers.map((t) => [t.name, t.coreShare])).toEqual([
      ['vip', 0],
      ['standard', 0.2],
      ['bulk', 0.5],
    ]);
    expect(p.default.name).toBe('bulk');
    expect(compilePriority({ tiers, default: 'standard' }, 0, 'p').default.name).toBe('standard');
  });

  it('admits each tier up to the limit less the shares above it', async () => {
    const clock = new ManualClock();
    const limiter = new Limiter({ resources: { db: { limits: fixed, priority: { tiers } } }, clock });
    // bulk sees 10 x (1 - 0.5) = 5, standard 10 x 0.8 = 8, vip the whole 10.
    expect(await take(limiter, 'db', 10)).toBe(5);
    expect(await take(limiter, 'db', 10, { priority: 'standard' })).toBe(3);
    expect(await take(limiter, 'db', 10, { priority: 'bulk' })).toBe(0);
    expect(await take(limiter, 'db', 10, { priority: 'vip' })).toBe(2);
    clock.advance(minute);
    // In the next window vip first: it may take it all, and nobody below gets any.
    expect(await take(limiter, 'db', 12, { priority: 'vip' })).toBe(10);
    expect(await take(limiter, 'db', 1, { priority: 'standard' })).toBe(0);
    await limiter.close();
  });

  it('keeps core and normal as the two-tier case of coreShare', async () => {
    const limiter = new Limiter({ resources: { db: { limits: fixed, priority: { coreShare: 0.3 } } }, clock: new ManualClock() });
    expect(await take(limiter, 'db', 10, { priority: 'normal' })).toBe(7);
    expect(await take(limiter, 'db', 10, { priority: 'core' })).toBe(3);
    await expect(limiter.try('db', { priority: 'vip' })).rejects.toMatchObject({ code: ErrorCodes.INVALID_OPTIONS });
    await limiter.close();
  });

  it('rejects a tier the resource does not declare with SLUICE_ERR_UNKNOWN_TIER', async () => {
    const limiter = new Limiter({ resources: { db: { limits: fixed, priority: { tiers } } }, clock: new ManualClock() });
    await expect(limiter.try('db', { priority: 'core' })).rejects.toMatchObject({
      code: ErrorCodes.UNKNOWN_TIER,
      field: 'priority',
      message: 'priority: resource "db" has no tier "core" (tiers: vip, standard, bulk)',
    });
    await expect(limiter.acquire('db', { priority: 'gold' })).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_TIER });
    await limiter.close();
  });

  it('denies each tier locally apart: a denial of one tier does not deny the tier above', async () => {
    const limiter = new Limiter({ resources: { db: { limits: fixed, priority: { tiers } } }, clock: new ManualClock() });
    expect(await take(limiter, 'db', 8, { priority: 'standard' })).toBe(8);
    const denied = await limiter.try('db', { priority: 'standard' });
    expect(denied.allowed).toBe(false);
    // The pre-filter learnt standard's denial; vip's view is its own.
    expect((await limiter.try('db', { priority: 'standard' })).source).toBe('prefilter');
    expect((await limiter.try('db', { priority: 'vip' })).allowed).toBe(true);
    await limiter.close();
  });

  it.each<[string, ResourceOptions['priority'], string, string]>([
    ['unknown field', { tiers: [{ name: 'a', weight: 1 }] } as never, 'resources.db.priority.tiers[0].weight', 'unknown field'],
    ['bad name', { tiers: [{ name: 'a|b' }] }, 'resources.db.priority.tiers[0].name', 'must match'],
    ['duplicate', { tiers: [{ name: 'a' }, { name: 'a' }] }, 'resources.db.priority.tiers[1].name', 'duplicate tier "a"'],
    [
      'lowest share',
      {
        tiers: [
          { name: 'a', share: 0.1 },
          { name: 'b', share: 0.1 },
        ],
      },
      'resources.db.priority.tiers[1].share',
      'must be 0',
    ],
    [
      'sum',
      { tiers: [{ name: 'a', share: 0.5 }, { name: 'b', share: 0.5 }, { name: 'c' }] },
      'resources.db.priority.tiers',
      'more than 0.9',
    ],
    ['default', { tiers: [{ name: 'a' }], default: 'b' }, 'resources.db.priority.default', 'must name one of the tiers: a'],
    ['both', { tiers: [{ name: 'a' }], coreShare: 0.1 }, 'resources.db.priority', 'give tiers or coreShare, not both'],
    ['empty', { tiers: [] }, 'resources.db.priority.tiers', 'must be a list of 1 to 16 tiers'],
  ])('rejects tiers: %s', (_, priority, field, message) => {
    const limiter = new Limiter({ resources: {}, clock: new ManualClock() });
    expect(() => limiter.setLimits('db', { limits: fixed, priority })).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field, message: expect.stringContaining(message) as string }),
    );
  });
});

describe('the worked example of docs/control-plane.md', () => {
  it('answers as the section says', async () => {
    const limiter = new Limiter({
      resources: {
        payments: {
          limits: { algorithm: 'token-bucket', limit: 10, windowMs: minute },
          priority: { tiers, default: 'standard' },
          boost: { limit: 3, windowMs: minute, tiers: ['vip'] },
        },
      },
      clock: new ManualClock(),
    });
    expect(await take(limiter, 'payments', 12)).toBe(8);
    expect(await take(limiter, 'payments', 3, { priority: 'bulk' })).toBe(0);
    const vip = [];
    for (let i = 0; i < 6; i++) vip.push(await limiter.try('payments', { priority: 'vip' }));
    expect(vip.map((d) => (d.boosted === true ? 'boosted' : d.allowed ? 'allowed' : 'denied'))).toEqual([
      'allowed',
      'allowed',
      'boosted',
      'boosted',
      'boosted',
      'denied',
    ]);
    await limiter.close();
  });
});

describe('the boost pool', () => {
  const resource = (boost: ResourceOptions['boost']): ResourceOptions => ({
    limits: fixed,
    priority: { tiers: [{ name: 'vip', share: 0.2 }, { name: 'standard' }], default: 'standard' },
    boost,
  });

  it('admits a denied call of an eligible tier from the pool, up to limit + boost per window', async () => {
    const clock = new ManualClock();
    const limiter = new Limiter({
      resources: { api: resource({ limit: 3, windowMs: minute, algorithm: 'fixed-window', tiers: ['vip'] }) },
      clock,
    });
    expect(await take(limiter, 'api', 20, { key: 'u1' })).toBe(8);
    const decisions = [];
    for (let i = 0; i < 6; i++) decisions.push(await limiter.try('api', { key: 'u1', priority: 'vip' }));
    // vip had the 2 kept for it, then 3 from the pool, then nothing.
    expect(decisions.map((d) => [d.allowed, d.boosted ?? false])).toEqual([
      [true, false],
      [true, false],
      [true, true],
      [true, true],
      [true, true],
      [false, false],
    ]);
    expect(decisions[4]).toMatchObject({ limit: 3, remaining: 0, limitId: 'boost' });
    expect(decisions[5]).toMatchObject({ reason: 'rate_limited', limitId: '0' });
    // Standard traffic never draws on the pool; another key has a pool of its own.
    expect((await limiter.try('api', { key: 'u1' })).boosted).toBeUndefined();
    expect(await take(limiter, 'api', 20, { key: 'u2', priority: 'vip' })).toBe(13);
    clock.advance(minute);
    expect(await take(limiter, 'api', 20, { key: 'u1', priority: 'vip' })).toBe(13);
    await limiter.close();
  });

  it('tells a denied boosted call to retry when either the limits or the pool have room', async () => {
    const clock = new ManualClock();
    const limiter = new Limiter({
      resources: { api: resource({ limit: 1, windowMs: 5_000, algorithm: 'fixed-window', tiers: ['vip'] }) },
      clock,
    });
    expect(await take(limiter, 'api', 12, { priority: 'vip' })).toBe(11);
    const denied = await limiter.try('api', { priority: 'vip' });
    expect(denied.allowed).toBe(false);
    expect(denied.retryAfterMs).toBeGreaterThan(0);
    expect(denied.retryAfterMs).toBeLessThanOrEqual(5_000);
    clock.advance(denied.retryAfterMs);
    expect(await limiter.try('api', { priority: 'vip' })).toMatchObject({ allowed: true, boosted: true });
    await limiter.close();
  });

  it('lets acquire wait for the pool and gives a refund back to it', async () => {
    const clock = new ManualClock();
    const limiter = new Limiter({
      resources: { api: resource({ limit: 2, windowMs: minute, algorithm: 'fixed-window', tiers: ['vip', 'standard'] }) },
      clock,
    });
    expect(await take(limiter, 'api', 8)).toBe(8);
    const d = await limiter.acquire('api', { maxWaitMs: 0 });
    expect(d).toMatchObject({ allowed: true, boosted: true });
    await limiter.close();
  });

  it.each<[string, unknown, string, string]>([
    ['unknown tier', { limit: 1, tiers: ['gold'] }, 'resources.api.boost.tiers[0]', 'must name one of the tiers: vip, standard'],
    ['no tiers', { limit: 1, tiers: [] }, 'resources.api.boost.tiers', 'at least one tier'],
    ['unknown field', { limit: 1, tiers: ['vip'], share: 1 }, 'resources.api.boost.share', 'unknown field'],
    ['concurrency', { limit: 1, algorithm: 'concurrency', tiers: ['vip'] }, 'resources.api.boost.algorithm', 'rate algorithm'],
  ])('rejects a pool: %s', (_, boost, field, message) => {
    const limiter = new Limiter({ resources: {}, clock: new ManualClock() });
    expect(() => limiter.setLimits('api', resource(boost as ResourceOptions['boost']))).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field, message: expect.stringContaining(message) as string }),
    );
  });

  it('is never reserved in batches, nor booked: both would bypass the pool', async () => {
    const limiter = new Limiter({
      resources: { api: resource({ limit: 1, windowMs: minute, algorithm: 'fixed-window', tiers: ['standard'] }) },
      clock: new ManualClock(),
    });
    expect(limiter.settingsOf('api').reservable).toBe(false);
    await expect(limiter.reserve('api', { min: 1, max: 5 })).rejects.toMatchObject({ code: ErrorCodes.INVALID_OPTIONS });
    expect(await take(limiter, 'api', 8)).toBe(8);
    const d = await limiter.book('api', { id: 'b-1' });
    expect(d).toMatchObject({ allowed: true, boosted: true, booking: { outcome: 'admitted' } });
    await limiter.close();
  });

  it('checks the pool limit as a policy and refuses leases with a pool', () => {
    const limiter = new Limiter({ resources: {}, clock: new ManualClock() });
    expect(() => limiter.setLimits('api', resource({ limit: 0, tiers: ['vip'] }))).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_POLICY, field: 'resources.api.boost.limit' }),
    );
    expect(() =>
      limiter.setLimits('api', {
        limits: fixed,
        lease: true,
        priority: { tiers: [{ name: 'vip' }] },
        boost: { limit: 1, tiers: ['vip'] },
      }),
    ).toThrow(expect.objectContaining({ field: 'resources.api.boost' }));
  });
});
