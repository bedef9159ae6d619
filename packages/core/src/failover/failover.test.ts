import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import { Limiter } from '../admission/limiter.js';
import { MemoryStore } from '../store/memory-store.js';
import type { AdjustRequest, ConsumeRequest, ConsumeResult, PermitRequest } from '../store/store.js';

/** A store that can be switched off like a Redis that went away. */
class FlakyStore extends MemoryStore {
  down = false;
  unreachable = false;
  calls = 0;
  #fail(): void {
    if (this.down) throw new SluiceError(ErrorCodes.STORE_TIMEOUT, 'timed out');
    if (this.unreachable) throw new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'connection refused');
  }
  override async consume(request: ConsumeRequest): Promise<ConsumeResult> {
    this.calls++;
    this.#fail();
    return super.consume(request);
  }
  override async adjust(request: AdjustRequest): Promise<void> {
    this.#fail();
    return super.adjust(request);
  }
  override async release(request: PermitRequest): Promise<boolean> {
    this.#fail();
    return super.release(request);
  }
  override async ping(): Promise<void> {
    this.#fail();
  }
}

function setup(onStoreFailure?: 'local' | 'open' | 'closed') {
  const clock = new ManualClock();
  const store = new FlakyStore({ clock });
  const logs: string[] = [];
  const switches: boolean[] = [];
  const limiter = new Limiter({
    resources: { api: { algorithm: 'fixed-window', limit: 100, windowMs: 60_000 } },
    store,
    clock,
    ...(onStoreFailure ? { onStoreFailure } : {}),
    failover: { peers: 4, logger: { info: (_o, m) => logs.push(`info ${m}`), warn: (_o, m) => logs.push(`warn ${m}`) } },
    observer: { storeSwitched: (e) => switches.push(e.healthy) },
  });
  return { clock, store, limiter, logs, switches };
}

describe('store failure policies', () => {
  it('local: falls back to a fair share of the limit, then returns to the store', async () => {
    const { clock, store, limiter, logs, switches } = setup('local');
    expect((await limiter.try('api')).source).toBeUndefined();
    store.down = true;
    let admitted = 0;
    // Decisions by the fallback after the switch (the third timeout in a row; the two before it
    // were answered by the policy too, before anyone knew the store was away).
    let byFallback = 0;
    for (let i = 0; i < 60; i++) {
      const d = await limiter.try('api', { key: 'k' });
      expect(d.source === 'fallback' || d.source === 'prefilter').toBe(true);
      if (d.allowed) admitted++;
      if (d.source === 'fallback' && i >= 2) byFallback++;
    }
    // 100 shared by 4 live clients: this one may admit 25 while the store is away.
    expect(admitted).toBe(25);
    const callsWhileDown = store.calls;
    await limiter.try('api', { key: 'other' });
    byFallback++;
    expect(store.calls).toBe(callsWhileDown);
    store.down = false;
    await clock.advanceAsync(600);
    const back = await limiter.try('api', { key: 'k' });
    expect(back.source).toBeUndefined();
    expect(back.allowed).toBe(true);
    expect(switches).toEqual([false, true]);
    // One line when it went away (naming the policy), one when it came back (with the fallback's count).
    expect(logs).toEqual([
      "warn store memory unreachable (timed out): deciding by the 'local' policy until it answers",
      `info store memory answers again after 0.1 s: global decisions resumed (${byFallback} decisions made by the fallback meanwhile)`,
    ]);
    expect(byFallback).toBeGreaterThan(25);
    await limiter.close();
    expect(clock.pendingTimers).toBe(1); // the store's own sweep timer
    await store.close();
  });

  it("names the policy in force in its line, with the resources whose policy differs, through the limiter's logger", async () => {
    const clock = new ManualClock();
    const store = new FlakyStore({ clock });
    const lines: { fields: object; msg: string }[] = [];
    const limiter = new Limiter({
      resources: {
        api: { algorithm: 'fixed-window', limit: 100, windowMs: 60_000 },
        pay: { limits: { algorithm: 'fixed-window', limit: 10, windowMs: 60_000 }, onStoreFailure: 'closed' },
      },
      store,
      clock,
      logger: { info: (fields, msg) => lines.push({ fields, msg }), warn: (fields, msg) => lines.push({ fields, msg }) },
    });
    store.unreachable = true;
    await limiter.try('api');
    await limiter.try('pay');
    expect(lines.map((l) => l.msg)).toEqual([
      "store memory unreachable (connection refused): deciding by the 'local' policy ('closed' for pay) until it answers",
    ]);
    expect(lines[0]!.fields).toMatchObject({ store: 'memory', event: 'store_unreachable' });
    await limiter.close();
    await store.close();
  });

  it('reports the store health: reachable, and while away since when, why and what the fallback decided', async () => {
    const { clock, store, limiter } = setup('open');
    expect(limiter.storeHealth()).toEqual({
      store: 'memory',
      reachable: true,
      policy: 'open',
      policies: "the 'open' policy",
      fallbackDecisions: 0,
    });
    store.unreachable = true;
    await limiter.try('api');
    await clock.advanceAsync(20);
    await limiter.try('api');
    expect(limiter.storeHealth()).toEqual({
      store: 'memory',
      reachable: false,
      policy: 'open',
      policies: "the 'open' policy",
      fallbackDecisions: 2,
      unreachableForMs: 20,
      reason: 'connection refused',
    });
    store.unreachable = false;
    await clock.advanceAsync(600);
    expect(limiter.storeHealth()).toMatchObject({ reachable: true, fallbackDecisions: 2 });
    expect(limiter.storeHealth().unreachableForMs).toBeUndefined();
    await limiter.close();
    await store.close();
  });

  it('open admits and closed denies while the store is away', async () => {
    for (const policy of ['open', 'closed'] as const) {
      const { store, limiter } = setup(policy);
      store.down = true;
      const d = await limiter.try('api');
      expect(d.allowed).toBe(policy === 'open');
      expect(d.source).toBe('fallback');
      if (policy === 'closed') expect(d.reason).toBe('store_unavailable');
      await limiter.close();
      await store.close();
    }
  });

  it('returns fallback permits to the fallback after the store is back', async () => {
    const clock = new ManualClock();
    const store = new FlakyStore({ clock });
    // Switched at the first timeout, so the permit comes from the local share.
    const limiter = new Limiter({
      resources: { pool: { algorithm: 'concurrency', limit: 2 } },
      store,
      clock,
      failover: { consecutiveFailures: 1, logger: false },
    });
    store.down = true;
    const d = await limiter.try('pool');
    expect(d.permitId).toMatch(/^local:/);
    store.down = false;
    await clock.advanceAsync(100);
    expect(await limiter.release('pool', { permitId: d.permitId! })).toBe(true);
    await limiter.close();
    await store.close();
  });

  it('passes bad-input errors through instead of falling back', async () => {
    const { limiter, store } = setup('open');
    await expect(limiter.try('api', { cost: 1000 })).rejects.toMatchObject({ code: ErrorCodes.COST_EXCEEDS_LIMIT });
    await limiter.close();
    await store.close();
  });
});

/** A store whose calls fail on demand: timed out, unreachable, or held until released together. */
class StallingStore extends MemoryStore {
  mode: 'ok' | 'timeout' | 'unreachable' = 'ok';
  #held: (() => void)[] = [];
  #listener: ((up: boolean, error?: unknown) => void) | undefined;
  peers: { count: number; known: boolean } | undefined;
  hold = false;

  override async consume(request: ConsumeRequest): Promise<ConsumeResult> {
    if (this.hold) await new Promise<void>((resolve) => this.#held.push(resolve));
    if (this.mode === 'timeout') throw new SluiceError(ErrorCodes.STORE_TIMEOUT, 'timed out');
    if (this.mode === 'unreachable') throw new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'connection refused');
    return super.consume(request);
  }
  override async ping(): Promise<void> {
    if (this.mode !== 'ok') throw new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'connection refused');
  }
  /** Settles every held call at once, as a stall that ends. */
  releaseHeld(): void {
    this.hold = false;
    for (const r of this.#held.splice(0)) r();
  }
  watchConnection(listener: (up: boolean, error?: unknown) => void): () => void {
    this.#listener = listener;
    return () => (this.#listener = undefined);
  }
  report(up: boolean): void {
    this.#listener?.(up, up ? undefined : new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'connection lost'));
  }
}

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

function stalling(options: { peers?: { count: number; known: boolean }; consecutiveFailures?: number } = {}) {
  const clock = new ManualClock();
  const store = new StallingStore({ clock });
  store.peers = options.peers;
  const switches: boolean[] = [];
  const limiter = new Limiter({
    resources: { api: { algorithm: 'fixed-window', limit: 100, windowMs: 60_000 } },
    store,
    clock,
    failover: {
      logger: false,
      ...(options.consecutiveFailures === undefined ? {} : { consecutiveFailures: options.consecutiveFailures }),
    },
    observer: { storeSwitched: (e) => switches.push(e.healthy) },
  });
  return { clock, store, limiter, switches };
}

describe('switching to the fallback', () => {
  it('answers one timed-out call by its policy without switching; three in a row switch', async () => {
    const { store, limiter, switches } = stalling({ peers: { count: 4, known: true } });
    store.mode = 'timeout';
    const one = await limiter.try('api');
    expect(one.source).toBe('fallback');
    store.mode = 'ok';
    expect((await limiter.try('api')).source).toBeUndefined();
    expect(switches).toEqual([]);
    store.mode = 'timeout';
    await limiter.try('api');
    await limiter.try('api');
    expect(switches).toEqual([]);
    await limiter.try('api');
    expect(switches).toEqual([false]);
    await limiter.close();
    await store.close();
  });

  it('counts calls that time out together as one failure', async () => {
    const { store, limiter, switches } = stalling({ peers: { count: 4, known: true } });
    store.mode = 'timeout';
    store.hold = true;
    const calls = Array.from({ length: 50 }, () => limiter.try('api', { key: 'k' }));
    await flush();
    store.releaseHeld();
    const decisions = await Promise.all(calls);
    expect(decisions.every((d) => d.source === 'fallback')).toBe(true);
    // Not switched: this process's global admissions are its share, so nothing more is admitted.
    expect(decisions.filter((d) => d.allowed)).toHaveLength(0);
    expect(decisions.every((d) => d.reason === 'store_unavailable')).toBe(true);
    expect(switches).toEqual([]);
    store.mode = 'ok';
    expect((await limiter.try('api')).source).toBeUndefined();
    await limiter.close();
    await store.close();
  });

  it('switches at once when the store reports connection loss, and probes at once when it reports return', async () => {
    const { store, limiter, switches } = stalling({ peers: { count: 2, known: true } });
    // A store that reports its connection: a failed call alone is one failure, not a loss.
    store.mode = 'unreachable';
    await limiter.try('api');
    expect(switches).toEqual([]);
    // A reported loss switches with no call made; a reported return is probed at once.
    store.report(false);
    expect(switches).toEqual([false]);
    store.mode = 'ok';
    store.report(true);
    await flush();
    expect(switches).toEqual([false, true]);
    await limiter.close();
    await store.close();
  });

  it('switches at once on an unreachable store that does not report its connection', async () => {
    const { clock, store, limiter, switches } = setup('local');
    store.unreachable = true;
    await limiter.try('api');
    expect(switches).toEqual([false]);
    store.unreachable = false;
    await clock.advanceAsync(50);
    expect(switches).toEqual([false, true]);
    await limiter.close();
    await store.close();
  });

  it('sizes the fallback by the store peer count, and denies until that count is known', async () => {
    const { store, limiter } = stalling({ peers: { count: 5, known: false }, consecutiveFailures: 1 });
    store.mode = 'unreachable';
    const before = await Promise.all(Array.from({ length: 10 }, () => limiter.try('api', { key: 'a' })));
    expect(before.filter((d) => d.allowed)).toHaveLength(0);
    store.peers!.known = true;
    let admitted = 0;
    for (let i = 0; i < 40; i++) if ((await limiter.try('api', { key: 'b' })).allowed) admitted++;
    expect(admitted).toBe(20);
    await limiter.close();
    await store.close();
  });

  it('gives each process limit / maxPeers while the count is unknown, and says so in the switch line', async () => {
    const clock = new ManualClock();
    const store = new StallingStore({ clock });
    store.peers = { count: 1, known: false };
    store.mode = 'unreachable';
    const lines: string[] = [];
    const logger = { info: (_: object, msg: string) => lines.push(msg), warn: (_: object, msg: string) => lines.push(msg) };
    const limiter = new Limiter({
      resources: { api: { algorithm: 'fixed-window', limit: 100, windowMs: 60_000 } },
      store,
      clock,
      failover: { logger, consecutiveFailures: 1, maxPeers: 4 },
    });
    let admitted = 0;
    for (let i = 0; i < 40; i++) if ((await limiter.try('api', { key: 'a' })).allowed) admitted++;
    expect(admitted).toBe(25);
    expect(lines.join('\n')).toContain("'local' gives each process 1/4 of every limit, failover.maxPeers");
    // Once a count is read it decides the share (2 processes: half of the limit for a new key).
    store.peers.known = true;
    store.peers.count = 2;
    admitted = 0;
    for (let i = 0; i < 80; i++) if ((await limiter.try('api', { key: 'b' })).allowed) admitted++;
    expect(admitted).toBe(50);
    expect(
      () =>
        new Limiter({ resources: { api: { algorithm: 'fixed-window', limit: 1, windowMs: 1000 } }, failover: { maxPeers: 0 } }),
    ).toThrow(/failover\.maxPeers/);
    await limiter.close();
    await store.close();
  });

  it('logs switches to stderr when no logger is given', async () => {
    const { createStderrLogger, resolveLogger, stderrLogger } = await import('../shared/log.js');
    expect(resolveLogger(undefined)).toBe(stderrLogger);
    expect(resolveLogger(false)).toBeUndefined();
    const lines: string[] = [];
    const log = createStderrLogger((l) => lines.push(l));
    log.warn({ err: new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'refused'), store: 'redis' }, 'store unavailable');
    const entry = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(entry).toMatchObject({
      level: 'warn',
      msg: 'store unavailable',
      store: 'redis',
      err: { code: 'SLUICE_ERR_STORE_UNAVAILABLE' },
    });
  });
});
