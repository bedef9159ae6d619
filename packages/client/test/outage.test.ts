import { RemoteLimiter } from '@sluice/client';
import type { Decision, LimiterObserver } from '@sluice/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { clearOfWindowEnd, eventually, liveHandles, rulesFile, spawnServe, type Serve } from './support.js';

const RULES = `
resources:
  api:local: { limits: { algorithm: fixed-window, limit: 40, windowMs: 600000 }, onStoreFailure: local }
  api:open: { limits: { algorithm: fixed-window, limit: 5, windowMs: 600000 }, onStoreFailure: open }
  api:closed: { limits: { algorithm: fixed-window, limit: 5, windowMs: 600000 }, onStoreFailure: closed }
  api:leased:
    limits: { algorithm: fixed-window, limit: 1000, windowMs: 600000 }
    lease: { ttlMs: 500, maxBatch: 20 }
    onStoreFailure: local
`;

describe('the service goes away (SIGKILL) and comes back', () => {
  const rules = rulesFile(RULES);
  const prefix = randomPrefix('client-outage');
  // The first start takes a free port; the restart reuses it, so the service comes back where
  // the client expects it.
  let port = 0;
  const start = async () => {
    const s = await spawnServe({ rules: rules.path, port, redis: redisUrl(), prefix });
    port = Number(new URL(s.url).port);
    return s;
  };
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  let serve: Serve | undefined;

  beforeAll(async () => {
    process.on('unhandledRejection', onUnhandled);
    serve = await start();
  });
  afterAll(async () => {
    process.off('unhandledRejection', onUnhandled);
    await serve?.stop('SIGKILL');
    rules.remove();
  });

  it('decides by policy with no errors while it is away, resumes global decisions after, and closes cleanly', async () => {
    const before = liveHandles();
    const switches: boolean[] = [];
    const logged: string[] = [];
    const observer: LimiterObserver = { storeSwitched: (e) => switches.push(e.healthy) };
    const logger = { info: (_: object, msg: string) => logged.push(msg), warn: (_: object, msg: string) => logged.push(msg) };
    const url = serve!.url;
    const client = new RemoteLimiter({ url, clients: 2, checkTimeoutMs: 500, observer, logger });
    expect(await client.ready()).toBe(true);
    // The key 'warm' is counted before the outage and after the restart, in one window of ten
    // minutes (see clearOfWindowEnd).
    await clearOfWindowEnd(600_000, 20_000);
    expect((await client.try('api:local', { key: 'warm' })).source).toBe('store');
    expect((await client.try('api:leased', { key: 'hot' })).allowed).toBe(true);

    await serve!.stop('SIGKILL');
    serve = undefined;

    const errors: unknown[] = [];
    const safe = (p: Promise<Decision>) => p.catch((e: unknown) => void errors.push(e));
    const local = await Promise.all(Array.from({ length: 50 }, () => safe(client.try('api:local', { key: 'outage' }))));
    const open = await safe(client.try('api:open'));
    const closed = await safe(client.try('api:closed'));
    const waited = await safe(client.acquire('api:local', { key: 'outage2', maxWaitMs: 0 }));
    const leased = await Promise.all(Array.from({ length: 30 }, () => safe(client.try('api:leased', { key: 'hot' }))));
    const sync = client.trySync('api:closed');
    expect(errors).toEqual([]);
    // The local policy holds a fair share: 40 / 2 clients.
    expect(local.filter((d) => d?.allowed).length).toBe(20);
    expect(local.every((d) => d?.source === 'fallback')).toBe(true);
    expect(open).toMatchObject({ allowed: true, source: 'fallback' });
    expect(closed).toMatchObject({ allowed: false, reason: 'store_unavailable', source: 'fallback' });
    expect(sync).toMatchObject({ allowed: false, reason: 'store_unavailable' });
    expect(waited).toMatchObject({ allowed: true, source: 'fallback' });
    expect(leased.every((d) => d?.allowed)).toBe(true);
    expect(client.healthy).toBe(false);

    serve = await start();
    await eventually(() => client.healthy);
    await eventually(async () => (await client.try('api:open')).source === 'store');
    expect(await client.try('api:local', { key: 'warm' })).toMatchObject({ allowed: true, source: 'store', remaining: 38 });
    expect(switches).toEqual([false, true]);
    expect(logged.filter((m) => m.startsWith(`sluice service at ${url} unreachable (`)).length).toBe(1);
    expect(logged.filter((m) => m.startsWith(`sluice service at ${url} answers again after `)).length).toBe(1);

    await client.close();
    await client.close();
    expect(unhandled).toEqual([]);
    // No socket or timer of the client outlives close().
    const after = liveHandles();
    expect(after.TCPSocketWrap ?? 0).toBeLessThanOrEqual(before.TCPSocketWrap ?? 0);
    expect(after.Timeout ?? 0).toBeLessThanOrEqual(before.Timeout ?? 0);
  });
});
