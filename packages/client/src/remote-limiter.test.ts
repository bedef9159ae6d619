import { ManualClock, isSluiceError, type Decision, type LimiterObserver } from '@sluice/core';
import { createPrometheusObserver } from '@sluice/core/metrics';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { RemoteLimiter } from './remote-limiter.js';
import { FakeService } from './testing/fake-service.js';

const RESOURCES = {
  'api:local': { limits: { algorithm: 'fixed-window' as const, limit: 30, windowMs: 60_000 }, onStoreFailure: 'local' as const },
  'api:open': { limits: { algorithm: 'fixed-window' as const, limit: 5, windowMs: 60_000 }, onStoreFailure: 'open' as const },
  'api:closed': { limits: { algorithm: 'fixed-window' as const, limit: 5, windowMs: 60_000 }, onStoreFailure: 'closed' as const },
  'db:pool': { limits: { algorithm: 'concurrency' as const, limit: 2, permitTtlMs: 60_000 } },
  'api:leased': {
    limits: { algorithm: 'fixed-window' as const, limit: 1000, windowMs: 60_000 },
    lease: { ttlMs: 200, maxBatch: 50, maxShare: 0.1 },
  },
};

const open: RemoteLimiter[] = [];
function setup(options: Partial<ConstructorParameters<typeof RemoteLimiter>[0]> = {}, serviceClients = 1) {
  const clock = new ManualClock(1_000_000);
  const service = new FakeService(RESOURCES, clock);
  service.clients = serviceClients;
  const events: { healthy: boolean }[] = [];
  const decided: Decision[] = [];
  const observer: LimiterObserver = {
    storeSwitched: (e) => events.push(e),
    decided: (e) => decided.push(e.decision),
  };
  const limiter = new RemoteLimiter({ url: 'http://sluice.test', transport: service, clock, observer, ...options });
  open.push(limiter);
  return { clock, service, limiter, events, decided };
}

afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close()));
});

/** Lets the probe's promise chain run after a manual-clock timer fired it. */
const settle = () => new Promise((r) => setImmediate(r));

describe('RemoteLimiter over a fake service', () => {
  it('reads the resources and coalesces the checks of one turn into bounded batches', async () => {
    const { limiter, service } = setup({ maxBatch: 20 });
    expect(await limiter.ready()).toBe(true);
    expect(limiter.has('api:local')).toBe(true);
    expect(limiter.has('nope')).toBe(false);
    const ds = await Promise.all(Array.from({ length: 50 }, () => limiter.try('api:local', { key: 'k' })));
    expect(ds.filter((d) => d.allowed)).toHaveLength(30);
    // The service's store decided each; once it denied the key, its pre-filter may answer the
    // rest of the batch (the in-process store decides at once, so it has learnt by then).
    expect(ds.filter((d) => d.allowed).every((d) => d.source === 'store')).toBe(true);
    expect(ds.every((d) => d.source === 'store' || (!d.allowed && d.source === 'prefilter'))).toBe(true);
    expect(ds[0]!.statuses).toHaveLength(1);
    // 50 checks of one turn: ceil(50 / 20) requests.
    expect(service.count('/v1/check')).toBe(3);
    const denied = ds.find((d) => !d.allowed)!;
    expect(denied).toMatchObject({ reason: 'rate_limited', remaining: 0, limit: 30 });
  });

  it('validates like the core limiter, without a call', async () => {
    const { limiter, service } = setup();
    await limiter.ready();
    const before = service.seen.length;
    const code = async (p: Promise<unknown>) =>
      p.then(
        () => 'ok',
        (e: unknown) => (isSluiceError(e) ? e.code : 'other'),
      );
    expect(await code(limiter.try('api:local', { key: 'x'.repeat(300) }))).toBe('SLUICE_ERR_INVALID_KEY');
    // An empty key would put every keyless caller in one bucket: absent is the resource-wide key.
    expect(await code(limiter.try('api:local', { key: '' }))).toBe('SLUICE_ERR_INVALID_KEY');
    expect(() => limiter.trySync('api:local', { key: '' })).toThrow(/key: is empty/);
    expect(await code(limiter.try('api:local', { cost: -1 }))).toBe('SLUICE_ERR_INVALID_COST');
    expect(await code(limiter.try('api:local', { cost: 31 }))).toBe('SLUICE_ERR_COST_EXCEEDS_LIMIT');
    expect(await code(limiter.try('nope'))).toBe('SLUICE_ERR_UNKNOWN_RESOURCE');
    expect(await code(limiter.try('api:local', { tenant: 'a|b' }))).toBe('SLUICE_ERR_INVALID_OPTIONS');
    expect(await code(limiter.acquire('api:local', { maxWaitMs: -5 }))).toBe('SLUICE_ERR_INVALID_OPTIONS');
    expect(await code(limiter.adjust('api:local', { delta: 1.5 }))).toBe('SLUICE_ERR_INVALID_COST');
    expect(await code(limiter.release('db:pool', { permitId: '' }))).toBe('SLUICE_ERR_INVALID_OPTIONS');
    expect(() => limiter.trySync('api:local', { cost: 1e12 })).toThrow(/cost/);
    expect(service.seen.length).toBe(before);
  });

  it("turns the service's 4xx answers into SluiceErrors with the service's code", async () => {
    const { limiter, service } = setup();
    await limiter.ready();
    // The service knows the resource no more: its own answer decides.
    service.limiter.setResources({ 'api:open': RESOURCES['api:open'] });
    const err = await limiter.try('api:local').catch((e: unknown) => e);
    expect(isSluiceError(err, 'SLUICE_ERR_UNKNOWN_RESOURCE')).toBe(true);
    expect(limiter.healthy).toBe(true);
  });

  it('takes, renews and releases concurrency permits remotely', async () => {
    const { limiter } = setup();
    await limiter.ready();
    const a = await limiter.try('db:pool', { key: 'w' });
    const b = await limiter.acquire('db:pool', { key: 'w', maxWaitMs: 0 });
    expect([a.allowed, b.allowed]).toEqual([true, true]);
    expect((await limiter.try('db:pool', { key: 'w' })).reason).toBe('concurrency_limited');
    expect(await limiter.renew('db:pool', { key: 'w', permitId: a.permitId!, ttlMs: 1000 })).toBe(true);
    expect(await limiter.release('db:pool', { key: 'w', permitId: a.permitId! })).toBe(true);
    expect(await limiter.release('db:pool', { key: 'w', permitId: a.permitId! })).toBe(false);
    expect((await limiter.try('db:pool', { key: 'w' })).allowed).toBe(true);
  });

  it('sends permitId', async () => {
    const { limiter, service } = setup();
    await limiter.ready();
    const a = await limiter.try('db:pool', { key: 'v' });
    expect(a.permitId).toEqual(expect.any(String));
    expect(await limiter.release('db:pool', { key: 'v', permitId: a.permitId! })).toBe(true);
    expect(service.seen.filter((s) => s.path === '/v1/release').map((s) => s.body)).toEqual([
      { resource: 'db:pool', key: 'v', permitId: a.permitId },
    ]);
  });

  it('decides by each store-failure policy while the service is away, then returns', async () => {
    const { limiter, service, clock, events } = setup({ clients: 3 });
    await limiter.ready();
    service.down = true;
    const local = await Promise.all(Array.from({ length: 15 }, () => limiter.try('api:local', { key: 'k' })));
    // A fair share: 30 / 3 clients.
    expect(local.filter((d) => d.allowed)).toHaveLength(10);
    expect(local.every((d) => d.source === 'fallback')).toBe(true);
    expect(await limiter.try('api:open')).toMatchObject({ allowed: true, source: 'fallback' });
    expect(await limiter.try('api:closed')).toMatchObject({ allowed: false, reason: 'store_unavailable', source: 'fallback' });
    expect(limiter.trySync('api:closed')).toMatchObject({ allowed: false, reason: 'store_unavailable' });
    const permit = await limiter.acquire('db:pool', { key: 'z' });
    expect(permit.permitId).toMatch(/^local:/);
    expect(await limiter.release('db:pool', { key: 'z', permitId: permit.permitId! })).toBe(true);
    expect(await limiter.renew('db:pool', { key: 'z', permitId: 'remote-lease' })).toBe(true);
    expect(events).toEqual([{ healthy: false }]);
    // Probes back off while the service stays away.
    const probesAt = (ms: number) => {
      clock.advance(ms);
      return settle();
    };
    await probesAt(50);
    await probesAt(100);
    const probes = service.count('/readyz');
    expect(probes).toBe(2);
    service.down = false;
    await probesAt(200);
    await settle();
    expect(limiter.healthy).toBe(true);
    expect(events).toEqual([{ healthy: false }, { healthy: true }]);
    expect(await limiter.try('api:open')).toMatchObject({ source: 'store' });
  });

  it('answers one timed-out check by its policy without a switch; three in a row switch', async () => {
    const { limiter, service, events } = setup({ clients: 3 });
    await limiter.ready();
    service.slow = true;
    const one = await Promise.all(Array.from({ length: 15 }, () => limiter.try('api:local', { key: 'k' })));
    // Checks in flight together time out together: one failure, answered without a switch; this
    // client's answers from the service are its share until a switch, so nothing more is admitted.
    expect(one.filter((d) => d.allowed)).toHaveLength(0);
    expect(one.every((d) => d.source === 'fallback' && d.reason === 'store_unavailable')).toBe(true);
    expect(events).toEqual([]);
    service.slow = false;
    expect(await limiter.try('api:open')).toMatchObject({ source: 'store' });
    service.slow = true;
    await limiter.try('api:open');
    await limiter.try('api:open');
    expect(events).toEqual([]);
    await limiter.try('api:open');
    expect(events).toEqual([{ healthy: false }]);
  });

  it("sizes the local share by the service's client count by default, and denies while there is none", async () => {
    const { limiter, service } = setup({}, 0);
    await limiter.ready();
    service.down = true;
    const none = await Promise.all(Array.from({ length: 5 }, () => limiter.try('api:local', { key: 'a' })));
    expect(none.every((d) => !d.allowed && d.reason === 'store_unavailable' && d.source === 'fallback')).toBe(true);

    const second = setup({}, 5);
    await second.limiter.ready();
    second.service.down = true;
    const shared = await Promise.all(Array.from({ length: 15 }, () => second.limiter.try('api:local', { key: 'a' })));
    // 30 shared by the 5 clients the service counts.
    expect(shared.filter((d) => d.allowed)).toHaveLength(6);
  });

  it('answers by policy, without a switch, when the pending queue is full', async () => {
    const { limiter, events } = setup({ maxPending: 5 });
    await limiter.ready();
    const ds = await Promise.all(Array.from({ length: 12 }, () => limiter.try('api:open')));
    expect(ds.filter((d) => d.source === 'store')).toHaveLength(5);
    expect(ds.filter((d) => d.source === 'fallback')).toHaveLength(7);
    expect(events).toEqual([]);
  });

  it('serves leased resources locally and returns leftovers on close', async () => {
    const { limiter, service } = setup();
    await limiter.ready();
    const first = await limiter.try('api:leased', { key: 'hot' });
    expect(first.allowed).toBe(true);
    let local = 0;
    for (let i = 0; i < 20; i++) if (limiter.trySync('api:leased', { key: 'hot' })?.source === 'lease') local++;
    expect(local).toBeGreaterThan(0);
    const reserves = service.count('/v1/reserve');
    expect(reserves).toBeGreaterThan(0);
    expect(reserves).toBeLessThan(1 + local);
    await limiter.close();
    // Every permit reserved and not used went back.
    const used = 1 + local;
    const d = await service.limiter.try('api:leased', { key: 'hot', cost: 0 });
    expect(d.remaining).toBe(1000 - used);
    expect(service.closed).toBe(true);
  });

  it('leases every reservable resource with the lease option, never concurrency limits', async () => {
    const { limiter, service } = setup({ lease: { ttlMs: 100, maxBatch: 10, maxShare: 1 } });
    await limiter.ready();
    // The refill's own decision is the store's (no source, as in the core limiter).
    expect((await limiter.try('api:open')).source ?? 'store').toBe('store');
    expect(service.count('/v1/reserve')).toBe(1);
    expect(limiter.trySync('api:open')?.source).toBe('lease');
    const permit = await limiter.try('db:pool', { key: 'c' });
    expect(permit.permitId).toBeDefined();
    expect(service.count('/v1/reserve')).toBe(1);
    expect(service.seen.filter((x) => x.path.startsWith('/v1/check'))).toHaveLength(1);
  });

  it('follows a rule change named by an answer header', async () => {
    const { limiter, service } = setup();
    await limiter.ready();
    service.setRules({
      ...RESOURCES,
      'api:local': { limits: { algorithm: 'fixed-window', limit: 4, windowMs: 60_000 }, onStoreFailure: 'local' },
      'api:new': { algorithm: 'fixed-window', limit: 1, windowMs: 1000 },
    });
    expect(limiter.has('api:new')).toBe(false);
    await limiter.try('api:open');
    await limiter.ready();
    await settle();
    expect(limiter.has('api:new')).toBe(true);
    expect(limiter.rulesVersion).toBe(2);
    // The fallback's limits follow the new version too.
    service.down = true;
    const ds = await Promise.all(Array.from({ length: 10 }, () => limiter.try('api:local', { key: 'f' })));
    expect(ds.filter((d) => d.allowed)).toHaveLength(4);
    await expect(limiter.try('api:local', { cost: 5 })).rejects.toThrow(/exceeds/);
  });

  it('ends an acquire when its signal fires, and close is idempotent and final', async () => {
    const { limiter, service } = setup();
    await limiter.ready();
    service.holdAcquire = true;
    const ac = new AbortController();
    const waiting = limiter.acquire('api:local', { signal: ac.signal, maxWaitMs: 5000 });
    await settle();
    ac.abort();
    const err = await waiting.catch((e: unknown) => e);
    expect(isSluiceError(err, 'SLUICE_ERR_ABORTED')).toBe(true);
    expect(limiter.healthy).toBe(true);
    await Promise.all([limiter.close(), limiter.close()]);
    const after = await limiter.try('api:local').catch((e: unknown) => e);
    expect(isSluiceError(after, 'SLUICE_ERR_CLOSED')).toBe(true);
  });

  it('counts decisions, fallbacks, switches and lease refills with the core Prometheus observer', async () => {
    const registry = new Registry();
    const { limiter, service } = setup({ observer: createPrometheusObserver({ registry }) });
    await limiter.ready();
    await limiter.try('api:open');
    await limiter.try('api:leased', { key: 'm' });
    service.down = true;
    await limiter.try('api:open');
    const text = await registry.metrics();
    const value = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
    expect(value(/sluice_decisions_total\{resource="api:open",mode="try",outcome="allowed",source="store"\} (\d+)/)).toBe(1);
    expect(value(/sluice_decisions_total\{resource="api:open",mode="try",outcome="allowed",source="fallback"\} (\d+)/)).toBe(1);
    expect(value(/^sluice_store_healthy (\d+)$/m)).toBe(0);
    expect(value(/^sluice_store_switches_total\{to="fallback"\} (\d+)$/m)).toBe(1);
    expect(value(/sluice_lease_refills_total\{resource="api:leased"\} (\d+)/)).toBe(1);
  });

  it('refuses malformed options', () => {
    expect(() => new RemoteLimiter({ url: 'ftp://x' })).toThrow(/url/);
    // The client calls the API at the origin's root: a path it would drop is refused.
    for (const url of ['http://h/prefix', 'http://h/prefix/', 'http://h/?a=1', 'http://h/#x', 'http://u:p@h']) {
      expect(() => new RemoteLimiter({ url }), url).toThrow(
        expect.objectContaining({ code: 'SLUICE_ERR_INVALID_OPTIONS', field: 'url' }),
      );
    }
    expect(() => new RemoteLimiter({ url: 'http://h:8080/' })).not.toThrow();
    expect(() => new RemoteLimiter({ url: 'http://x', maxBatch: 0 })).toThrow(/maxBatch/);
    expect(() => new RemoteLimiter({ url: 'http://x', clientId: 'a b' })).toThrow(/clientId/);
    expect(() => new RemoteLimiter({ url: 'http://x', lease: { ttlMs: -1 } })).toThrow(/ttlMs/);
  });
});
