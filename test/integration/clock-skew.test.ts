/**
 * Clock skew against real Redis: a process whose wall clock is deliberately 5 s off measures
 * the offset to Redis' clock within the measurement's uncertainty, warns once, exports it, and
 * a gateway's decision-age check given the measured skew judges fresh and lapsed blocks right
 * where the skewed wall clock alone judges them wrong.
 */
import { ClockSkewMonitor, type ClockSkewMonitorOptions } from '@sluice/core';
import { createClockSkewObserver } from '@sluice/core/metrics';
import { DecisionCache } from '@sluice/gateway';
import { RedisStore, redisTimeSource } from '@sluice/redis';
import { hashValue, type GovernanceDecision } from '@sluice/stream';
import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisClusterNodes, redisUrl } from '../env.js';

/** Redis runs on this host: its clock is this host's, so the true offset is minus the shift. */
const SHIFT_MS = 5000;
/** Date.now() is whole ms while Redis answers µs: the estimate may be off by this on top. */
const ROUNDING_MS = 1;

function recorder() {
  const lines: { level: string; obj: Record<string, unknown>; msg: string }[] = [];
  return {
    lines,
    logger: {
      info: (obj: object, msg: string) => lines.push({ level: 'info', obj: obj as Record<string, unknown>, msg }),
      warn: (obj: object, msg: string) => lines.push({ level: 'warn', obj: obj as Record<string, unknown>, msg }),
    },
  };
}

function block(issuedAtMs: number): GovernanceDecision {
  return {
    action: 'block',
    dimension: 'user',
    value: hashValue('mallory'),
    ttlMs: 1000,
    retryAfterMs: 1000,
    ruleId: 'r1',
    issuedAtMs: Math.floor(issuedAtMs),
  };
}

describe('clock skew against Redis', () => {
  let store: RedisStore;
  const monitors: ClockSkewMonitor[] = [];
  const monitor = async (options: ClockSkewMonitorOptions) => {
    const m = new ClockSkewMonitor(options);
    monitors.push(m);
    // A few readings: the one with the smallest round trip wins.
    for (let i = 0; i < 4; i++) await m.sample();
    return m;
  };

  beforeAll(() => {
    // A generous timeout: on a loaded machine a reading may take longer than the adaptive bound.
    store = new RedisStore({ url: redisUrl(), prefix: randomPrefix('skew'), peerRegistry: false, commandTimeoutMs: 2000 });
  });
  afterAll(async () => {
    await Promise.all(monitors.map((m) => m.close()));
    await store.close();
  });

  it('measures a clock 5 s ahead within its uncertainty, warns once and exports the skew', async () => {
    const { lines, logger } = recorder();
    const registry = new Registry();
    const ahead = await monitor({
      source: redisTimeSource(store),
      name: 'redis',
      wallClock: () => Date.now() + SHIFT_MS,
      logger,
      observer: createClockSkewObserver({ registry }),
    });
    const s = ahead.status();
    expect(s, JSON.stringify(s)).toMatchObject({ measured: true, skewed: true, warnings: 1 });
    expect(s.samples + s.failures).toBe(4);
    expect(Math.abs(s.offsetMs + SHIFT_MS), JSON.stringify(s)).toBeLessThanOrEqual(s.uncertaintyMs + ROUNDING_MS);
    expect(lines.map((l) => l.level)).toEqual(['warn']);
    expect(lines[0]!.obj).toMatchObject({ store: 'redis', thresholdMs: 1000 });
    const skew = (await registry.getSingleMetric('sluice_clock_skew_seconds')!.get()).values[0]!.value * 1000;
    expect(Math.abs(skew + SHIFT_MS)).toBeLessThanOrEqual(s.uncertaintyMs + ROUNDING_MS);
    expect((await registry.getSingleMetric('sluice_clock_skew_warnings_total')!.get()).values[0]!.value).toBe(1);
  });

  it('finds no skew on a synchronised clock, through a plain client too', async () => {
    const client = new Redis(redisUrl());
    try {
      const { lines, logger } = recorder();
      const synced = await monitor({ source: redisTimeSource(client), logger });
      const s = synced.status();
      expect(s, JSON.stringify(s)).toMatchObject({ measured: true, skewed: false, warnings: 0 });
      expect(Math.abs(s.offsetMs), JSON.stringify(s)).toBeLessThanOrEqual(s.uncertaintyMs + ROUNDING_MS);
      expect(lines).toEqual([]);
    } finally {
      client.disconnect();
    }
  });

  it("reads Redis' clock on Redis Cluster too", async () => {
    const cluster = new RedisStore({
      clusterNodes: redisClusterNodes(),
      prefix: randomPrefix('skew'),
      peerRegistry: false,
      commandTimeoutMs: 2000,
    });
    try {
      const before = Date.now();
      const t = await cluster.time();
      const after = Date.now();
      // The nodes run on this host: their clocks are this host's (a generous bound, far below a skew worth warning about).
      expect(t).toBeGreaterThanOrEqual(before - 100);
      expect(t).toBeLessThanOrEqual(after + 100);
    } finally {
      await cluster.close();
    }
  });

  it("judges blocks' ages right on a skewed gateway given the measured skew", async () => {
    // Blocks stamped on Redis' clock (an aggregator given its own measured skew stamps them so).
    const fresh = block(await store.time());
    const lapsed = block((await store.time()) - 4000);
    const ahead = () => Date.now() + SHIFT_MS;
    const behind = () => Date.now() - SHIFT_MS;
    const caches: DecisionCache[] = [];
    const cache = (options: ConstructorParameters<typeof DecisionCache>[0]) => {
      const c = new DecisionCache({ maxClockSkewMs: 1000, ...options });
      caches.push(c);
      return c;
    };
    try {
      // The skewed wall clock alone: the fresh block looks 5 s old, the lapsed one not yet issued.
      expect(cache({ wallClock: ahead }).apply(fresh)).toBe(false);
      expect(cache({ wallClock: behind }).apply(lapsed)).toBe(true);
      const aheadSkew = await monitor({ source: redisTimeSource(store), wallClock: ahead, logger: false });
      const behindSkew = await monitor({ source: redisTimeSource(store), wallClock: behind, logger: false });
      expect(cache({ wallClock: ahead, clockSkew: aheadSkew }).apply(fresh)).toBe(true);
      expect(cache({ wallClock: behind, clockSkew: behindSkew }).apply(lapsed)).toBe(false);
    } finally {
      await Promise.all(caches.map((c) => c.close()));
    }
  });
});
