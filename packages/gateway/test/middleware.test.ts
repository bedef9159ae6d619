import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Limiter } from '@sluice/core';
import {
  MemoryTransport,
  decodeEvents,
  encodeDecisions,
  hashValue,
  type GatewayEvent,
  type GovernanceDecision,
  type Subscription,
} from '@sluice/stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Gateway } from '../src/index.js';
import { FRAMEWORKS, startServer, type RunningServer } from './servers.js';

const PARTITIONS = 2;

interface Rig {
  transport: MemoryTransport;
  gateway: Gateway;
  server: RunningServer;
  events: GatewayEvent[];
  limiter?: Limiter;
}

const rigs: Rig[] = [];
const subs: Subscription[] = [];

async function rig(framework: (typeof FRAMEWORKS)[number], options: { limit?: boolean } = {}): Promise<Rig> {
  const transport = new MemoryTransport({ partitions: PARTITIONS });
  const gateway = new Gateway({
    transport,
    probe: { flushIntervalMs: 1 },
    dimensions: { user: { header: 'x-user' }, tenant: { header: 'x-tenant' } },
    policies: { 'per-user': { quota: 100, windowSeconds: 10 } },
  });
  await gateway.start();
  const events: GatewayEvent[] = [];
  for (let p = 0; p < PARTITIONS; p++) {
    subs.push(await transport.consume(p, 'test', async (batch) => void events.push(...decodeEvents(batch))));
  }
  const limiter = options.limit
    ? new Limiter({ resources: { login: { algorithm: 'fixed-window', limit: 2, windowMs: 60_000 } } })
    : undefined;
  const server = await startServer(
    framework,
    gateway,
    limiter && { limiter, resource: 'login', key: (req) => req.headers['x-user'] as string },
  );
  const r = { transport, gateway, server, events, limiter };
  rigs.push(r);
  return r;
}

afterEach(async () => {
  for (const r of rigs.splice(0)) {
    await r.server.close();
    await r.gateway.close();
    await r.limiter?.close();
  }
  await Promise.all(subs.splice(0).map((s) => s.stop()));
});

function block(overrides: Partial<GovernanceDecision>): GovernanceDecision {
  return {
    action: 'block',
    dimension: 'user',
    value: hashValue('mallory'),
    ttlMs: 3000,
    retryAfterMs: 2500,
    ruleId: 'per-user',
    issuedAtMs: Date.now(),
    ...overrides,
  };
}

const get = (r: Rig, path: string, headers: Record<string, string> = {}) => fetch(r.server.url + path, { headers });

describe.each(FRAMEWORKS)('gateway middleware on %s', (framework) => {
  it('lets a request through and reports one event with the right hashes', async () => {
    const r = await rig(framework);
    const res = await get(r, '/orders/42?verbose=1', { 'x-user': 'alice', 'x-tenant': 'acme' });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('ok');
    await vi.waitFor(() => expect(r.events).toHaveLength(1));
    const [e] = r.events;
    expect(e).toMatchObject({
      resource: hashValue('/orders'),
      path: hashValue(r.server.orderPath),
      user: hashValue('alice'),
      ip: hashValue('127.0.0.1'),
      tenant: hashValue('acme'),
      status: 200,
      outcome: 0,
    });
    expect(Math.abs(e!.timestampMs - Date.now())).toBeLessThan(60_000);

    const fail = await get(r, '/fail/1');
    expect(fail.status).toBe(500);
    await vi.waitFor(() => expect(r.events).toHaveLength(2));
    expect(r.events[1]).toMatchObject({ resource: hashValue('/fail'), user: 0, tenant: 0, status: 500, outcome: 1 });
  });

  it('reports a request the client gave up on as an error without a status', async () => {
    const r = await rig(framework);
    const abort = new AbortController();
    const pending = fetch(r.server.url + '/hang/1', { signal: abort.signal }).catch((err: unknown) => err);
    await new Promise((resolve) => setTimeout(resolve, 100));
    abort.abort();
    expect(await pending).toBeInstanceOf(Error);
    await vi.waitFor(() => expect(r.events).toHaveLength(1));
    expect(r.events[0]).toMatchObject({ resource: hashValue('/hang'), status: 0, outcome: 1 });
  });

  it('answers 429 with Retry-After and RateLimit headers for a blocked value, and reports nothing', async () => {
    const r = await rig(framework);
    await r.transport.broadcast(encodeDecisions([block({})]));
    await vi.waitFor(() => expect(r.gateway.cache.size).toBe(1));
    const res = await get(r, '/orders/42', { 'x-user': 'mallory' });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('3');
    expect(res.headers.get('ratelimit-policy')).toBe('"per-user";q=100;w=10');
    expect(res.headers.get('ratelimit')).toBe('"per-user";r=0;t=3');
    expect(await res.json()).toEqual({ error: 'too_many_requests', policy: 'per-user', retryAfterSeconds: 3 });
    // Other users pass; the blocked one produced no event.
    expect((await get(r, '/orders/42', { 'x-user': 'alice' })).status).toBe(200);
    await vi.waitFor(() => expect(r.events).toHaveLength(1));
    expect(r.events[0]!.user).toBe(hashValue('alice'));
    await r.gateway.probe!.close();
    expect(r.gateway.probe!.stats.sent).toBe(1);

    // A lift ends the block at once.
    await r.transport.broadcast(encodeDecisions([block({ action: 'lift', ttlMs: 0 })]));
    await vi.waitFor(() => expect(r.gateway.cache.size).toBe(0));
    expect((await get(r, '/orders/42', { 'x-user': 'mallory' })).status).toBe(200);
  });

  it('blocks by resource, path and IP too', async () => {
    const r = await rig(framework);
    await r.transport.broadcast(
      encodeDecisions([
        block({ dimension: 'path', value: hashValue(r.server.orderPath), ruleId: 'hot-path' }),
        block({ dimension: 'resource', value: hashValue('/fail'), ruleId: 'hot-api' }),
      ]),
    );
    await vi.waitFor(() => expect(r.gateway.cache.size).toBe(2));
    const byPath = await get(r, '/orders/42');
    expect(byPath.status).toBe(429);
    expect(byPath.headers.get('ratelimit-policy')).toBe('"hot-path";q=0;w=3');
    expect((await get(r, '/fail/3')).status).toBe(429);
    await r.transport.broadcast(encodeDecisions([block({ dimension: 'ip', value: hashValue('127.0.0.1'), ruleId: 'ip' })]));
    await vi.waitFor(() => expect(r.gateway.cache.size).toBe(3));
    expect((await get(r, '/orders/99')).status).toBe(429);
  });

  it('keeps answering while the stream is down, counting the dropped events', async () => {
    const r = await rig(framework);
    await r.transport.close();
    const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) => get(r, `/orders/${i}`).then((res) => res.status)));
    expect(statuses).toEqual(Array.from({ length: 20 }, () => 200));
    await vi.waitFor(() => expect(r.gateway.probe!.stats.dropped.publish_error).toBe(20));
    expect(r.gateway.probe!.stats).toMatchObject({ sent: 0, buffered: 0 });
  });

  it('applies an exact limiter on a route after the cache, with RateLimit headers', async () => {
    const r = await rig(framework, { limit: true });
    const first = await get(r, '/login', { 'x-user': 'bob' });
    expect(first.status).toBe(200);
    expect(first.headers.get('ratelimit-policy')).toBe('"login";q=2');
    expect(first.headers.get('ratelimit')).toMatch(/^"login";r=1;t=\d+$/);
    expect((await get(r, '/login', { 'x-user': 'bob' })).status).toBe(200);
    const third = await get(r, '/login', { 'x-user': 'bob' });
    expect(third.status).toBe(429);
    expect(Number(third.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(third.headers.get('ratelimit')).toBe(`"login";r=0;t=${third.headers.get('retry-after')}`);
    expect((await get(r, '/login', { 'x-user': 'carol' })).status).toBe(200);
    // The limiter's 429 is an answer the gateway gave: it is reported, with its status.
    await vi.waitFor(() => expect(r.events).toHaveLength(4));
    expect(r.events.map((e) => e.status).sort()).toEqual([200, 200, 200, 429]);
    expect(new Set(r.events.map((e) => e.resource))).toEqual(new Set([hashValue('login')]));
  });
});

describe('gateway.handle on node:http', () => {
  it('answers 429 itself when blocked and lets the handler answer otherwise', async () => {
    const transport = new MemoryTransport({ partitions: 1 });
    const gateway = new Gateway({ transport, dimensions: { ip: false, user: { header: 'x-user' } } });
    const items = gateway.route({ path: '/items/:id' });
    const server = createServer((req, res) => {
      if (!gateway.handle(req, res, req.url?.startsWith('/items/') ? items : undefined)) return;
      res.end('ok');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      gateway.cache.apply(block({ dimension: 'path', value: hashValue('/items/:id'), ruleId: '' }));
      const res = await fetch(`${url}/items/3`);
      expect(res.status).toBe(429);
      expect(res.headers.get('ratelimit')).toBe('"governance";r=0;t=3');
      expect((await fetch(`${url}/other`)).status).toBe(200);
      await gateway.close();
      expect(gateway.probe!.stats.sent).toBe(1);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      await gateway.close();
      await transport.close();
    }
  });
});

describe('gateway.wrap with a per-route limit on node:http', () => {
  it('limits each key a header selector reads, apart, with the limiter headers', async () => {
    const limiter = new Limiter({ resources: { search: { algorithm: 'fixed-window', limit: 2, windowMs: 60_000 } } });
    const gateway = new Gateway({ dimensions: { ip: false } });
    const handler = gateway.wrap((_req, res) => res.end('ok'), {
      limit: { limiter, resource: 'search', key: { header: 'x-tenant' } },
    });
    const server = createServer(handler);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/search`;
    try {
      const as = (tenant: string) => fetch(url, { headers: { 'x-tenant': tenant } });
      const statuses = [];
      for (const tenant of ['acme', 'acme', 'acme', 'globex']) statuses.push((await as(tenant)).status);
      expect(statuses).toEqual([200, 200, 429, 200]);
      const refused = await as('acme');
      expect(refused.headers.get('ratelimit')).toBe(`"search";r=0;t=${refused.headers.get('retry-after')}`);
      expect(await refused.json()).toMatchObject({ error: 'too_many_requests', policy: 'search' });
      expect((await as('globex')).headers.get('ratelimit')).toMatch(/^"search";r=0;t=\d+$/);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      await gateway.close();
      await limiter.close();
    }
  });
});

describe('gateway under a flood of distinct clients', () => {
  it('holds bounded state whatever the number of users, blocks or stalled events', async () => {
    const transport = new MemoryTransport({ partitions: 1, queueCapacity: 1 });
    const gateway = new Gateway({
      transport,
      probe: { batchSize: 10, maxBufferedEvents: 200, maxInFlight: 1 },
      cache: { maxEntries: 500 },
      dimensions: { user: { header: 'x-user' } },
    });
    await gateway.start();
    const server = await startServer('node:http', gateway);
    try {
      // Nobody consumes and the partition holds one batch: the stream stalls at once.
      const blocks = Array.from({ length: 3000 }, (_, i) => block({ value: hashValue(`bad-${i}`) }));
      for (let i = 0; i < blocks.length; i += 1000) await transport.broadcast(encodeDecisions(blocks.slice(i, i + 1000)));
      await vi.waitFor(() => expect(gateway.cache.stats.blocks).toBe(3000));
      expect(gateway.cache.size).toBe(500);
      for (let round = 0; round < 10; round++) {
        const statuses = await Promise.all(
          Array.from({ length: 100 }, (_, i) =>
            fetch(`${server.url}/orders/${i}`, { headers: { 'x-user': `user-${round}-${i}-${'x'.repeat(2000)}` } }).then(
              (res) => res.status,
            ),
          ),
        );
        expect(statuses.every((s) => s === 200)).toBe(true);
        expect(gateway.probe!.stats.buffered).toBeLessThanOrEqual(200);
      }
      const { dropped, buffered, sent } = gateway.probe!.stats;
      expect(sent + buffered + dropped.buffer_full + dropped.publish_error).toBe(1000);
      expect(dropped.buffer_full + dropped.publish_error).toBeGreaterThan(0);
    } finally {
      await server.close();
      await gateway.close();
      await transport.close();
    }
  });
});
