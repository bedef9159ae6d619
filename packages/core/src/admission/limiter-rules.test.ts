import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { ErrorCodes } from '../shared/errors.js';
import { Limiter } from './limiter.js';

const minute = 60_000;

describe('tenants', () => {
  const resources = {
    'api:search': {
      limits: { algorithm: 'fixed-window', limit: 10, windowMs: minute },
      tenants: {
        acme: { algorithm: 'fixed-window', limit: 6, windowMs: minute },
        '*': { algorithm: 'fixed-window', limit: 3, windowMs: minute },
      },
    },
  } as const;

  it('draws on the tenant quota inside the resource quota', async () => {
    const limiter = new Limiter({ resources, clock: new ManualClock() });
    const take = async (tenant: string, n: number) => {
      let ok = 0;
      for (let i = 0; i < n; i++) if ((await limiter.try('api:search', { tenant })).allowed) ok++;
      return ok;
    };
    expect(await take('acme', 10)).toBe(6);
    const denied = await limiter.try('api:search', { tenant: 'acme' });
    expect(denied.limitId).toBe('tenant:0');
    // Tenants without their own quota share the '*' default, each on their own.
    expect(await take('small-co', 5)).toBe(3);
    // Only 1 permit of the resource's 10 is left.
    expect(await take('other-co', 3)).toBe(1);
    await limiter.close();
  });

  it('gives the tenant its permits back when the resource denies', async () => {
    const limiter = new Limiter({ resources, clock: new ManualClock() });
    for (let i = 0; i < 10; i++) await limiter.try('api:search', { priority: 'core' });
    const d = await limiter.try('api:search', { tenant: 'acme' });
    expect(d.allowed).toBe(false);
    expect(d.limitId).toBe('0');
    limiter.setLimits('api:search', {
      ...resources['api:search'],
      limits: { algorithm: 'fixed-window', limit: 100, windowMs: minute },
    });
    let ok = 0;
    for (let i = 0; i < 10; i++) if ((await limiter.try('api:search', { tenant: 'acme' })).allowed) ok++;
    expect(ok).toBe(6);
    await limiter.close();
  });

  it('adjusts the tenant quota with the resource when adjust names the tenant', async () => {
    const limiter = new Limiter({ resources, clock: new ManualClock() });
    for (let i = 0; i < 6; i++) expect((await limiter.try('api:search', { tenant: 'acme' })).allowed).toBe(true);
    expect((await limiter.try('api:search', { tenant: 'acme' })).limitId).toBe('tenant:0');
    // A refund of the resource alone leaves the tenant's quota spent.
    await limiter.adjust('api:search', { delta: -2 });
    expect((await limiter.try('api:search', { tenant: 'acme' })).allowed).toBe(false);
    // Naming the tenant refunds both.
    await limiter.adjust('api:search', { delta: -2, tenant: 'acme' });
    expect((await limiter.try('api:search', { tenant: 'acme' })).allowed).toBe(true);
    expect((await limiter.try('api:search', { tenant: 'acme' })).allowed).toBe(true);
    expect((await limiter.try('api:search', { tenant: 'acme' })).limitId).toBe('tenant:0');
    // A tenant's extra charge is charged to its quota too.
    await limiter.adjust('api:search', { delta: 1, tenant: 'small-co' });
    expect((await limiter.try('api:search', { tenant: 'small-co', cost: 3 })).limitId).toBe('tenant:0');
    await expect(limiter.adjust('api:search', { delta: -1, tenant: 'a|b' })).rejects.toMatchObject({ field: 'tenant' });
    await limiter.close();
  });

  it('rejects bad tenant names', async () => {
    const limiter = new Limiter({ resources });
    await expect(limiter.try('api:search', { tenant: 'a|b' })).rejects.toMatchObject({
      code: ErrorCodes.INVALID_OPTIONS,
      field: 'tenant',
    });
    await limiter.close();
  });
});

describe('priorities', () => {
  it('sheds normal traffic first, keeping the core share for core', async () => {
    const limiter = new Limiter({
      resources: { db: { limits: { algorithm: 'fixed-window', limit: 10, windowMs: minute }, priority: { coreShare: 0.3 } } },
      clock: new ManualClock(),
    });
    let normal = 0;
    for (let i = 0; i < 10; i++) if ((await limiter.try('db')).allowed) normal++;
    expect(normal).toBe(7);
    const shed = await limiter.try('db');
    expect(shed).toMatchObject({ allowed: false, remaining: 0 });
    let core = 0;
    for (let i = 0; i < 10; i++) if ((await limiter.try('db', { priority: 'core' })).allowed) core++;
    expect(core).toBe(3);
    await expect(limiter.try('db', { priority: 'urgent' as never })).rejects.toMatchObject({ field: 'priority' });
    await limiter.close();
  });

  it('names the share coreShare, bounded by MAX_CORE_SHARE', async () => {
    const clock = new ManualClock();
    const fixed = { algorithm: 'fixed-window', limit: 10, windowMs: minute } as const;
    const limiter = new Limiter({ resources: { db: { limits: fixed, priority: { coreShare: 0.3 } } }, clock });
    let normal = 0;
    for (let i = 0; i < 10; i++) if ((await limiter.try('db')).allowed) normal++;
    expect(normal).toBe(7);
    expect((await limiter.try('db', { priority: 'core' })).allowed).toBe(true);
    expect(limiter.settingsOf('db').reservable).toBe(false);
    expect(() => limiter.setLimits('db', { limits: fixed, priority: { coreShare: 0.95 } })).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field: 'resources.db.priority.coreShare' }),
    );
    // `reserved`, the name of 0.1, is no field.
    expect(() => limiter.setLimits('db', { limits: fixed, priority: { reserved: 0.3 } as never })).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field: 'resources.db.priority.reserved' }),
    );
    await limiter.close();
  });
});

describe('shadow mode', () => {
  it('admits what it would deny, and says so', async () => {
    const limiter = new Limiter({
      resources: { api: { limits: { algorithm: 'fixed-window', limit: 2, windowMs: minute }, shadow: true } },
      clock: new ManualClock(),
    });
    const decisions = [];
    for (let i = 0; i < 4; i++) decisions.push(await limiter.try('api'));
    expect(decisions.every((d) => d.allowed)).toBe(true);
    expect(decisions.map((d) => d.shadow?.reason)).toEqual([undefined, undefined, 'rate_limited', 'rate_limited']);
    expect(decisions[3]!.shadow!.retryAfterMs).toBeGreaterThan(0);
    await limiter.close();
  });
});

describe('setResources', () => {
  it('replaces the whole set atomically and keeps state of resources that stay', async () => {
    const limiter = new Limiter({
      resources: { a: { algorithm: 'fixed-window', limit: 3, windowMs: minute }, b: { algorithm: 'gcra', limit: 1 } },
      clock: new ManualClock(),
    });
    await limiter.try('a', { cost: 2 });
    expect(() => limiter.setResources({ a: { algorithm: 'fixed-window', limit: 0 } })).toThrow(/limit/);
    expect(limiter.resources().sort()).toEqual(['a', 'b']);
    limiter.setResources({ a: { algorithm: 'fixed-window', limit: 5, windowMs: minute }, c: { algorithm: 'gcra', limit: 1 } });
    expect(limiter.resources().sort()).toEqual(['a', 'c']);
    expect((await limiter.try('a')).remaining).toBe(2);
    await expect(limiter.try('b')).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_RESOURCE });
    await limiter.close();
  });
});
