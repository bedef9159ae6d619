import { Redis } from 'ioredis';
import { RedisStreamsTransport } from '@sluice/stream/redis';
import { decodeEvents, encodeDecisions, hashValue, partitionOf, type GatewayEvent, type Subscription } from '@sluice/stream';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Gateway } from '../src/index.js';
import { randomPrefix, redisUrl } from './env.js';
import { startServer, type RunningServer } from './servers.js';

const PARTITIONS = 4;

describe('gateway over Redis Streams', () => {
  const url = redisUrl();
  const prefix = randomPrefix();
  let gatewaySide: RedisStreamsTransport;
  let aggregatorSide: RedisStreamsTransport;
  let gateway: Gateway;
  let server: RunningServer;
  const events: GatewayEvent[] = [];
  const misplaced: GatewayEvent[] = [];
  const subs: Subscription[] = [];

  beforeAll(async () => {
    gatewaySide = new RedisStreamsTransport({ partitions: PARTITIONS, url, prefix });
    aggregatorSide = new RedisStreamsTransport({ partitions: PARTITIONS, url, prefix, blockMs: 100 });
    for (let p = 0; p < PARTITIONS; p++) {
      subs.push(
        await aggregatorSide.consume(p, 'aggregators', async (batch, info) => {
          for (const e of decodeEvents(batch)) {
            events.push(e);
            if (partitionOf(e.resource, PARTITIONS) !== info.partition) misplaced.push(e);
          }
        }),
      );
    }
    gateway = new Gateway({ transport: gatewaySide, probe: { flushIntervalMs: 5 }, dimensions: { user: { header: 'x-user' } } });
    await gateway.start();
    server = await startServer('express', gateway);
  });

  afterAll(async () => {
    await server?.close();
    await gateway?.close();
    await Promise.all(subs.map((s) => s.stop()));
    await gatewaySide?.close();
    await aggregatorSide?.close();
    const admin = new Redis(url);
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  });

  it('publishes one event per answered request to the partition of its resource', async () => {
    const statuses = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        fetch(`${server.url}/${i % 2 === 0 ? 'orders' : 'fail'}/${i}`, { headers: { 'x-user': `u${i}` } }).then((r) => r.status),
      ),
    );
    expect(statuses.filter((s) => s === 200)).toHaveLength(25);
    await vi.waitFor(() => expect(events).toHaveLength(50), { timeout: 10_000 });
    expect(new Set(events.map((e) => e.user))).toEqual(new Set(Array.from({ length: 50 }, (_, i) => hashValue(`u${i}`))));
    expect(events.filter((e) => e.resource === hashValue('/fail')).every((e) => e.status === 500 && e.outcome === 1)).toBe(true);
    expect(misplaced).toEqual([]);
    expect(gateway.probe!.stats).toMatchObject({ sent: 50, publishErrors: 0 });
  });

  it('applies decisions broadcast by another process and lets them lapse', async () => {
    const issued = Date.now();
    await aggregatorSide.broadcast(
      encodeDecisions([
        {
          action: 'block',
          dimension: 'user',
          value: hashValue('mallory'),
          // Long enough to outlast delivery and the first request on a loaded machine.
          ttlMs: 4000,
          retryAfterMs: 1000,
          ruleId: 'r',
          issuedAtMs: issued,
        },
      ]),
    );
    await vi.waitFor(() => expect(gateway.cache.size).toBe(1), { timeout: 20_000 });
    const blocked = await fetch(`${server.url}/orders/1`, { headers: { 'x-user': 'mallory' } });
    expect(blocked.status).toBe(429);
    expect(blocked.headers.get('retry-after')).toBe('1');
    // No refresh: the block lapses by itself.
    await vi.waitFor(
      async () => expect((await fetch(`${server.url}/orders/1`, { headers: { 'x-user': 'mallory' } })).status).toBe(200),
      { timeout: 20_000, interval: 100 },
    );
    expect(Date.now() - issued).toBeGreaterThanOrEqual(3900);
  });
});

describe('gateway with its Redis stream unreachable', () => {
  it('answers every request and counts the events it could not send', async () => {
    // Nothing listens on this port: every publish fails within the command timeout.
    const transport = new RedisStreamsTransport({
      partitions: 2,
      url: 'redis://127.0.0.1:18499',
      prefix: randomPrefix(),
      commandTimeoutMs: 200,
      reconnectMaxMs: 200,
    });
    const gateway = new Gateway({ transport, probe: { flushIntervalMs: 5, maxBufferedEvents: 50, closeTimeoutMs: 100 } });
    const server = await startServer('node:http', gateway);
    try {
      for (let round = 0; round < 4; round++) {
        const statuses = await Promise.all(
          Array.from({ length: 50 }, (_, i) => fetch(`${server.url}/orders/${i}`).then((r) => r.status)),
        );
        expect(statuses.every((s) => s === 200)).toBe(true);
      }
      await vi.waitFor(() => expect(gateway.probe!.stats.buffered).toBe(0), { timeout: 10_000 });
      const { sent, dropped } = gateway.probe!.stats;
      expect(sent).toBe(0);
      expect(dropped.publish_error + dropped.buffer_full).toBe(200);
    } finally {
      await server.close();
      await gateway.close();
      await transport.close();
    }
  });
});
