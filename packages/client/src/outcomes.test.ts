import { ManualClock } from '@sluice/core';
import { afterEach, describe, expect, it } from 'vitest';
import { RemoteLimiter } from './remote-limiter.js';
import { FakeService } from './testing/fake-service.js';
import type { Transport } from './transport.js';

const RESOURCES = { 'api:x': { limits: { algorithm: 'fixed-window' as const, limit: 100, windowMs: 60_000 } } };
const open: RemoteLimiter[] = [];
function setup(options: Partial<ConstructorParameters<typeof RemoteLimiter>[0]> = {}) {
  const clock = new ManualClock(1_000_000);
  const service = new FakeService(RESOURCES, clock);
  const limiter = new RemoteLimiter({ url: 'http://sluice.test', transport: service, clock, ...options });
  open.push(limiter);
  return { clock, service, limiter };
}
afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close()));
});

describe('RemoteLimiter outcome reports', () => {
  it('call() reports each outcome; reports go out in batches after outcomeFlushMs', async () => {
    const { clock, service, limiter } = setup({ outcomeFlushMs: 200, maxBatch: 3 });
    await limiter.ready();
    expect(await limiter.call('api:x', async () => 7, { key: 'k1' })).toBe(7);
    await expect(limiter.call('api:x', () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(service.count('/v1/outcomes')).toBe(0);
    await clock.advanceAsync(200);
    expect(service.count('/v1/outcomes')).toBe(1);
    expect(service.outcomes).toMatchObject([
      { resource: 'api:x', key: 'k1', ok: true },
      { resource: 'api:x', ok: false },
    ]);
    // A full batch goes at once.
    for (let i = 0; i < 3; i++) limiter.reportOutcome({ resource: 'api:x', ok: true, durationMs: 1 });
    await limiter.close();
    expect(service.count('/v1/outcomes')).toBe(2);
    expect(limiter.outcomeStats).toEqual({ sent: 5, dropped: 0, refused: 0 });
  });

  it('sends reports with outcomesToken, every other call with token', async () => {
    const clock = new ManualClock(1_000_000);
    const service = new FakeService(RESOURCES, clock);
    const tokens = new Map<string, string | undefined>();
    const transport: Transport = {
      call: (path, options) => {
        tokens.set(path.split('?')[0]!, options.token);
        return service.call(path, options);
      },
      close: () => service.close(),
    };
    const limiter = new RemoteLimiter({ url: 'http://sluice.test', transport, clock, token: 'data', outcomesToken: 'reports' });
    open.push(limiter);
    await limiter.ready();
    await limiter.call('api:x', async () => 1);
    await limiter.close();
    // The transport sends `token` itself; only reports name another.
    expect(tokens.get('/v1/outcomes')).toBe('reports');
    const others = [...tokens].filter(([path]) => path !== '/v1/outcomes');
    expect(others.length).toBeGreaterThan(0);
    expect(others.map(([, token]) => token)).toEqual(others.map(() => undefined));
    expect(limiter.outcomeStats.sent).toBe(1);
  });

  it('drops (and counts) reports past the queue bound, refused items and failed requests', async () => {
    const { clock, service, limiter } = setup({ maxQueuedOutcomes: 2, outcomeFlushMs: 100 });
    await limiter.ready();
    const queued = [1, 2, 3].map(() => limiter.reportOutcome({ resource: 'api:x', ok: true, durationMs: 1 }));
    expect(queued).toEqual([true, true, false]);
    await clock.advanceAsync(100);
    limiter.reportOutcome({ resource: 'nope', ok: true, durationMs: 1 });
    await clock.advanceAsync(100);
    limiter.reportOutcome({ resource: 'api:x', ok: true, durationMs: 1 });
    service.down = true;
    await clock.advanceAsync(100);
    expect(limiter.outcomeStats).toEqual({ sent: 2, dropped: 2, refused: 1 });
    await limiter.close();
  });

  it('logs an outage as one line each way, for the decisions and for the reports, never per call', async () => {
    const lines: { level: string; fields: object; msg: string }[] = [];
    const logger = {
      info: (fields: object, msg: string) => lines.push({ level: 'info', fields, msg }),
      warn: (fields: object, msg: string) => lines.push({ level: 'warn', fields, msg }),
    };
    const { clock, service, limiter } = setup({ outcomeFlushMs: 100, logger });
    await limiter.ready();
    lines.length = 0; // the rules version line
    service.down = true;
    let byFallback = 0;
    for (let i = 0; i < 20; i++) {
      const d = await limiter.try('api:x', { key: `k${i}` });
      if (d.source === 'fallback') byFallback++;
      limiter.reportOutcome({ resource: 'api:x', ok: true, durationMs: 1 });
      await clock.advanceAsync(100);
    }
    service.down = false;
    await clock.advanceAsync(1000);
    limiter.reportOutcome({ resource: 'api:x', ok: true, durationMs: 1 });
    await clock.advanceAsync(100);
    expect(byFallback).toBeGreaterThan(0);
    const msgs = lines.map((l) => `${l.level} ${l.msg}`);
    expect(msgs).toHaveLength(4);
    expect(msgs).toContain(
      "warn sluice service at http://sluice.test unreachable (connection refused): deciding by the 'local' policy until it answers",
    );
    expect(msgs).toContain(
      'warn sluice client: outcome reports not delivered (connection refused): they are dropped (counted) until the service takes them',
    );
    // A refused connection switches at once: every decision of the outage was the fallback's.
    expect(msgs.find((m) => m.startsWith('info sluice service at http://sluice.test answers again after'))).toMatch(
      `global decisions resumed (${byFallback} decisions made by the fallback meanwhile)`,
    );
    expect(msgs.find((m) => m.startsWith('info sluice client: outcome reports delivered again after'))).toMatch(
      /\(20 dropped meanwhile\)$/,
    );
    expect(JSON.stringify(lines)).not.toContain('    at ');
  });

  it('sends what is queued on close', async () => {
    const { service, limiter } = setup({ outcomeFlushMs: 60_000 });
    limiter.reportOutcome({ resource: 'api:x', ok: false, durationMs: 3 });
    await limiter.close();
    expect(service.outcomes).toHaveLength(1);
  });
});
