/**
 * The service's count of live clients (the divisor of every client's fallback share), and a
 * client that starts while the service is away: against a real `sluice serve`.
 */
import { RemoteLimiter } from '@sluice/client';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '@sluice/redis/testing';
import { eventually, rulesFile, spawnServe } from './support.js';

const RULES = `
resources:
  api:local: { limits: { algorithm: fixed-window, limit: 40, windowMs: 600000 }, onStoreFailure: local }
`;

/** The live clients the service reports to its clients (`GET /v1/resources`'s `clients`). */
async function liveClients(url: string): Promise<number> {
  const body = (await (await fetch(new URL('/v1/resources', url))).json()) as { clients: number };
  return body.clients;
}

describe('live clients', () => {
  const rules = rulesFile(RULES);
  afterAll(() => rules.remove());

  it('are counted while they poll, not once they said goodbye, and not long after they went silent', async () => {
    const serve = await spawnServe({ rules: rules.path });
    const clients: RemoteLimiter[] = [];
    try {
      for (const clientId of ['a', 'b', 'c']) {
        const c = new RemoteLimiter({ url: serve.url, clientId, rulesPollMs: 200 });
        clients.push(c);
        expect(await c.ready()).toBe(true);
      }
      await eventually(async () => (await liveClients(serve.url)) === 3);
      // A clean close says goodbye: counted no longer, at once.
      await clients.pop()!.close();
      expect(await liveClients(serve.url)).toBe(2);
      // A client that vanished without a goodbye (a crash) is dropped after three missed
      // heartbeats of 1 s (3 s), not after a minute: this one polled once and stopped.
      const vanished = await fetch(new URL('/v1/resources', serve.url), {
        headers: { 'sluice-client-id': 'crashed', 'sluice-client-heartbeat-ms': '1000' },
      });
      expect(vanished.status).toBe(200);
      expect(await liveClients(serve.url)).toBe(3);
      await eventually(async () => (await liveClients(serve.url)) === 2, 30_000);
      // A restart under the same id (a stable clientId) is the same client, never two.
      const again = new RemoteLimiter({ url: serve.url, clientId: 'a', rulesPollMs: 200 });
      clients.push(again);
      expect(await again.ready()).toBe(true);
      expect(await liveClients(serve.url)).toBe(2);
    } finally {
      await Promise.all(clients.map((c) => c.close()));
      expect(await serve.stop()).toBe(0);
    }
  });

  it('started while the service is away, answers limited calls by denying (store_unavailable), then decides when it comes', async () => {
    const port = await freePort();
    const client = new RemoteLimiter({ url: `http://127.0.0.1:${port}`, checkTimeoutMs: 500, rulesPollMs: 200 });
    let serve;
    try {
      // No resource list yet: no limit and no policy known. Answered, never thrown at.
      const early = await client.try('api:local', { key: 'k' });
      expect(early).toMatchObject({ allowed: false, reason: 'store_unavailable', source: 'fallback' });
      expect(early.retryAfterMs).toBeGreaterThan(0);
      expect(await client.acquire('api:local', { key: 'k', maxWaitMs: 50 })).toMatchObject({
        allowed: false,
        reason: 'store_unavailable',
      });
      // The caller's own mistakes are still refused.
      await expect(client.try('api:local', { key: '' })).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_KEY' });
      serve = await spawnServe({ rules: rules.path, port });
      await eventually(async () => (await client.try('api:local', { key: 'k' })).source === 'store');
    } finally {
      await client.close();
      if (serve !== undefined) expect(await serve.stop()).toBe(0);
    }
  });
});
