import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { SluiceError } from '../shared/errors.js';
import { Limiter } from '../admission/limiter.js';
import { MemoryStore } from '../store/memory-store.js';
import { createPrometheusObserver } from '../metrics.js';
import { Registry } from 'prom-client';

const breaker = {
  scope: 'fleet' as const,
  windowMs: 1000,
  minimumCalls: 10,
  failureRateThreshold: 0.5,
  openDurationMs: 1000,
  halfOpenProbes: 2,
  syncMs: 100,
};

/** Several limiters sharing one store: the processes of a fleet. */
function fleet(n: number) {
  const clock = new ManualClock(0);
  const store = new MemoryStore({ clock, sweepIntervalMs: 0 });
  const resources = { db: { limits: { algorithm: 'fixed-window' as const, limit: 1_000_000, windowMs: 60_000 }, breaker } };
  const limiters = Array.from({ length: n }, () => new Limiter({ store, clock, resources }));
  return { clock, store, limiters };
}

/** Every limiter tries one call; what the downstream saw. */
async function round(limiters: Limiter[], ok: boolean): Promise<number> {
  let reached = 0;
  await Promise.all(
    limiters.map(async (l) => {
      const d = await l.try('db');
      if (!d.allowed) return;
      reached++;
      l.record('db', { success: ok, durationMs: 1 });
    }),
  );
  return reached;
}

describe('fleet-wide breaker', () => {
  it('opens on every process from failures reported by all, limits the probes fleet-wide, then closes everywhere', async () => {
    const { clock, limiters } = fleet(4);
    // 3 failing calls each: no process alone reaches the 10-call minimum, the fleet does.
    for (let i = 0; i < 3; i++) expect(await round(limiters, false)).toBe(4);
    await clock.advanceAsync(100); // the reports go out
    await round(limiters, false); // calls made while the news travels are admitted and reported
    await clock.advanceAsync(100);
    for (const l of limiters) expect(l.fleetBreakerOf('db')?.state).toBe('open');
    const denied = await limiters[0]!.try('db');
    expect(denied).toMatchObject({ allowed: false, reason: 'circuit_open' });
    expect(await round(limiters, true)).toBe(0);

    await clock.advanceAsync(1000); // half-open: only two probes pass in the whole fleet
    const admitted: Limiter[] = [];
    for (let i = 0; i < 3; i++) {
      for (const l of limiters) if ((await l.try('db')).allowed) admitted.push(l);
      await clock.advanceAsync(50);
    }
    expect(admitted).toHaveLength(2);
    for (const l of admitted) l.record('db', { success: true, durationMs: 1 }); // reported at once: closed
    await clock.advanceAsync(100);
    await clock.advanceAsync(100);
    expect(await round(limiters, true)).toBe(4);
    for (const l of limiters) expect(l.fleetBreakerOf('db')?.state).toBe('closed');
    await Promise.all(limiters.map((l) => l.close()));
  });

  it('tallies outcomes, by cohort too, for outcomeTotals', async () => {
    const { clock, store, limiters } = fleet(1);
    const l = limiters[0]!;
    l.reportOutcome({ resource: 'db', ok: false, durationMs: 2000, count: 2 }, 'candidate');
    l.reportOutcome({ resource: 'db', ok: true, durationMs: 10 });
    await clock.advanceAsync(100);
    expect(await store.outcomeTotals('db', 60_000)).toEqual({ calls: 3, failures: 2, slow: 2, totalDurationMs: 4010 });
    expect(await l.outcomeTotals('db', 60_000, 'candidate')).toEqual({ calls: 2, failures: 2, slow: 2, totalDurationMs: 4000 });
    expect(await store.outcomeTotals('db', 60_000, 'baseline')).toEqual({ calls: 0, failures: 0, slow: 0, totalDurationMs: 0 });
    await clock.advanceAsync(61_000);
    expect((await store.outcomeTotals('db', 60_000)).calls).toBe(0);
    await l.close();
  });

  it('refuses a fleet breaker on a store that keeps none, and bad windows', async () => {
    const store = new MemoryStore();
    const bare = { ...store, name: 'bare', consume: store.consume.bind(store) } as unknown as MemoryStore;
    const make = () => new Limiter({ store: bare, resources: { db: { limits: { algorithm: 'gcra', limit: 1 }, breaker } } });
    expect(make).toThrow(SluiceError);
    expect(make).toThrow(/keeps no fleet-wide breakers/);
    await expect(store.outcomeTotals('db', 0)).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_OPTIONS' });
    await store.close();
  });

  it('sends what is pending on close', async () => {
    const { store, limiters } = fleet(1);
    limiters[0]!.reportOutcome({ resource: 'db', ok: true, durationMs: 1 });
    await limiters[0]!.close();
    expect((await store.outcomeTotals('db', 1000)).calls).toBe(1);
  });

  it('counts state changes and failed reports in the Prometheus observer', async () => {
    const clock = new ManualClock(0);
    const store = new MemoryStore({ clock, sweepIntervalMs: 0 });
    const registry = new Registry();
    const resources = { db: { limits: { algorithm: 'fixed-window' as const, limit: 1000, windowMs: 60_000 }, breaker } };
    const l = new Limiter({ store, clock, resources, observer: createPrometheusObserver({ registry }), logger: false });
    await l.try('db');
    for (let i = 0; i < 10; i++) l.record('db', { success: false, durationMs: 1 });
    await clock.advanceAsync(100);
    await store.close(); // reports fail from now on
    l.record('db', { success: false, durationMs: 1 });
    await clock.advanceAsync(100);
    const text = await registry.metrics();
    expect(text).toContain('sluice_fleet_breaker_transitions_total{resource="db",to="open"} 1');
    expect(text).toContain('sluice_outcome_reports_failed_total{resource="db"} 1');
    expect(l.fleetBreakerOf('db')).toMatchObject({ state: 'open', errors: 1, dropped: 1, sent: 10 });
    await l.close();
  });
});

describe('outcome reports the store does not take', () => {
  it('are logged as one line when they start failing and one when the store takes them again', async () => {
    const clock = new ManualClock(0);
    let away = false;
    class AwayStore extends MemoryStore {
      override outcomes(request: Parameters<MemoryStore['outcomes']>[0]) {
        if (away) return Promise.reject(new SluiceError('SLUICE_ERR_STORE_UNAVAILABLE', 'the store is away'));
        return super.outcomes(request);
      }
    }
    const store = new AwayStore({ clock, sweepIntervalMs: 0 });
    const lines: string[] = [];
    const logger = {
      info: (_f: object, m: string) => lines.push(`info ${m}`),
      warn: (_f: object, m: string) => lines.push(`warn ${m}`),
    };
    const resources = { db: { limits: { algorithm: 'fixed-window' as const, limit: 1000, windowMs: 60_000 }, breaker } };
    const l = new Limiter({ store, clock, resources, logger });
    await l.try('db');
    away = true;
    for (let i = 0; i < 5; i++) {
      l.record('db', { success: true, durationMs: 1 });
      await clock.advanceAsync(100);
    }
    away = false;
    l.record('db', { success: true, durationMs: 1 });
    await clock.advanceAsync(100);
    expect(lines).toEqual([
      'warn outcome reports not taken by store memory (the store is away): their outcomes are dropped (counted) and fleet breakers keep their last known state until it takes them',
      'info outcome reports taken by store memory again after 0.5 s (5 reports failed meanwhile)',
    ]);
    expect(l.fleetBreakerOf('db')).toMatchObject({ errors: 5, dropped: 5 });
    await l.close();
    await store.close();
  });
});

describe('fleet-wide breaker on a leased resource', () => {
  it('trySync serves leased permits only while the breaker is known closed, and refreshes it', async () => {
    const clock = new ManualClock(0);
    const store = new MemoryStore({ clock, sweepIntervalMs: 0 });
    const resources = {
      db: { limits: { algorithm: 'token-bucket' as const, limit: 1000, windowMs: 1000 }, lease: true as const, breaker },
    };
    const [a, b] = [new Limiter({ store, clock, resources }), new Limiter({ store, clock, resources })];
    expect(a.trySync('db')).toBeUndefined(); // never heard from the store
    await clock.advanceAsync(1);
    expect((await a.try('db')).allowed).toBe(true); // takes a lease
    expect(a.trySync('db')?.allowed).toBe(true);
    for (let i = 0; i < 10; i++) b.reportOutcome({ resource: 'db', ok: false, durationMs: 1 });
    await clock.advanceAsync(100); // b's report opens the breaker
    a.trySync('db'); // a's state is stale: refreshed in the background
    await clock.advanceAsync(1);
    expect(a.trySync('db')).toBeUndefined();
    expect(await a.try('db')).toMatchObject({ allowed: false, reason: 'circuit_open' });
    await Promise.all([a.close(), b.close()]);
  });
});
