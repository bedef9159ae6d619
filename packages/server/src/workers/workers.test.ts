import { Counter, Gauge, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { SettingsError, loadSettings } from '../settings.js';
import { WorkerLink, type Channel } from './link.js';
import { forAggregation, mergeMetrics, mergeStats, type StatsBody } from './merge.js';
import { MAX_RESTART_DELAY_MS, RESTART_DELAY_MS, nextRestartDelay } from './primary.js';
import type { PrimaryMessage, WorkerMessage } from './protocol.js';

const REDIS = { redisUrl: 'redis://127.0.0.1:6379' };

describe('--workers', () => {
  it('is 1 by default, a count, or auto (one per available core)', () => {
    expect(loadSettings({}, {}).workers).toBe(1);
    expect(loadSettings({ ...REDIS, workers: '3' }, {}).workers).toBe(3);
    expect(loadSettings({ ...REDIS }, { SLUICE_WORKERS: 'auto' }).workers).toBeGreaterThanOrEqual(1);
  });

  it('refuses what is not a count of workers, naming the flag and variable', () => {
    expect(() => loadSettings({ ...REDIS, workers: '0' }, {})).toThrow(
      /--workers \/ SLUICE_WORKERS: must be a number of workers \(1-64\) or auto/,
    );
    expect(() => loadSettings({ ...REDIS, workers: 'many' }, {})).toThrow(SettingsError);
    expect(() => loadSettings({ ...REDIS, workers: '65' }, {})).toThrow(/1-64/);
  });

  it('refuses more than one worker on the embedded store, whose state is per process', () => {
    expect(() => loadSettings({ workers: '2', rules: ['r.yaml'] }, {})).toThrow(
      /--workers 2 shares limits .* give --redis or --redis-cluster/,
    );
    expect(loadSettings({ workers: '1', rules: ['r.yaml'] }, {}).workers).toBe(1);
  });
});

describe('replacing a dead worker', () => {
  it('waits longer while workers die young, and the first delay again after one lived', () => {
    expect(nextRestartDelay(undefined, 5)).toBe(RESTART_DELAY_MS);
    let d = RESTART_DELAY_MS;
    for (let i = 0; i < 20; i++) d = nextRestartDelay(d, 5);
    expect(d).toBe(MAX_RESTART_DELAY_MS);
    expect(nextRestartDelay(d, 60_000)).toBe(RESTART_DELAY_MS);
  });
});

describe('metrics over workers', () => {
  async function worker(decisions: number, version: number, remaining: number) {
    const registry = new Registry();
    new Counter({ name: 'sluice_decisions_total', help: 'd', labelNames: ['resource'], registers: [registry] }).inc(
      { resource: 'a' },
      decisions,
    );
    new Gauge({ name: 'sluice_rules_version', help: 'v', registers: [registry] }).set(version);
    new Gauge({ name: 'sluice_remaining_permits', help: 'r', labelNames: ['resource'], registers: [registry] }).set(
      { resource: 'a' },
      remaining,
    );
    new Gauge({ name: 'sluice_connections_open', help: 'c', registers: [registry] }).set(2);
    return forAggregation(await registry.getMetricsAsJSON());
  }

  it('sums counters and open connections, but not the rule version or what is left of a limit', async () => {
    const text = await mergeMetrics([await worker(3, 4, 10), await worker(5, 5, 7)]).metrics();
    expect(text).toContain('sluice_decisions_total{resource="a"} 8');
    expect(text).toContain('sluice_rules_version 5');
    expect(text).toContain('sluice_remaining_permits{resource="a"} 7');
    expect(text).toContain('sluice_connections_open 4');
  });
});

describe('/v1/stats over workers', () => {
  const body = (allowed: number, remaining: number, reachable: boolean, fallback: number): StatsBody => ({
    at: 1,
    version: 2,
    resources: [
      {
        resource: 'a',
        allowed,
        denied: 1,
        shadowDenied: 0,
        limit: 100,
        remaining,
        tiers: [{ tier: 't', allowed, denied: 1, boosted: 0, shadowDenied: 0 }],
      },
    ],
    health: {
      store: 'redis',
      reachable,
      policy: 'local',
      policies: 'p',
      fallbackDecisions: fallback,
      clientsSeen: 3,
      decisionP99Seconds: remaining / 1000,
    },
    hotKeys: [
      {
        resource: 'a',
        windowMs: 1000,
        calls: allowed,
        mitigated: 0,
        keys: [{ key: 'k', calls: allowed, error: 0, rate: allowed, share: 1, mitigation: undefined }],
      },
    ],
    clockSkew: { same: true },
  });

  it('sums decisions, takes the least left, the largest p99, and the store as reachable only when every worker reaches it', () => {
    const merged = mergeStats(body(10, 50, true, 0), [body(20, 40, false, 5)]);
    expect(merged.resources).toEqual([
      {
        resource: 'a',
        allowed: 30,
        denied: 2,
        shadowDenied: 0,
        limit: 100,
        remaining: 40,
        tiers: [{ tier: 't', allowed: 30, denied: 2, boosted: 0, shadowDenied: 0 }],
      },
    ]);
    expect(merged.health).toMatchObject({ reachable: false, fallbackDecisions: 5, clientsSeen: 3, decisionP99Seconds: 0.05 });
    expect(merged.hotKeys[0]).toMatchObject({ calls: 30, keys: [{ key: 'k', calls: 30, share: 1 }] });
    expect(merged.clockSkew).toEqual({ same: true });
  });
});

/** A channel to a primary played by the test. */
class FakeChannel implements Channel {
  readonly sent: WorkerMessage[] = [];
  #listeners: ((m: unknown) => void)[] = [];
  send(m: WorkerMessage) {
    this.sent.push(m);
  }
  on(_e: 'message', l: (m: unknown) => void) {
    this.#listeners.push(l);
  }
  off(_e: 'message', l: (m: unknown) => void) {
    this.#listeners = this.#listeners.filter((x) => x !== l);
  }
  deliver(m: PrimaryMessage) {
    for (const l of this.#listeners) l(m);
  }
}

describe('a worker link', () => {
  it("answers the primary's collect with its own figures and resolves a gather with every worker's", async () => {
    const channel = new FakeChannel();
    const link = new WorkerLink(2, channel);
    try {
      link.provide('stats', async (admin) => ({ mine: admin }));
      channel.deliver({ sluice: 'collect', id: 7, kind: 'stats', arg: true });
      await new Promise((r) => setImmediate(r));
      expect(channel.sent).toContainEqual({ sluice: 'collected', id: 7, value: { mine: true } });
      const gathered = link.gather('stats', false);
      const ask = channel.sent.find((m) => m.sluice === 'gather')!;
      expect(ask).toMatchObject({ kind: 'stats', arg: false });
      channel.deliver({ sluice: 'gathered', id: (ask as { id: number }).id, values: [1, 2] });
      await expect(gathered).resolves.toEqual([1, 2]);
    } finally {
      link.close();
    }
  });

  it('says it has nothing to collect before it serves', async () => {
    const channel = new FakeChannel();
    const link = new WorkerLink(1, channel);
    try {
      channel.deliver({ sluice: 'collect', id: 1, kind: 'metrics', arg: null });
      await new Promise((r) => setImmediate(r));
      expect(channel.sent).toContainEqual({ sluice: 'collected', id: 1, error: 'worker 1 is not serving yet' });
    } finally {
      link.close();
    }
  });

  it('counts the remote clients of every worker, and its own at once', () => {
    const link = new WorkerLink(1, new FakeChannel());
    try {
      link.clients.note('client-a', '1000');
      expect(link.clients.count()).toBe(1);
      const channel = new FakeChannel();
      const other = new WorkerLink(2, channel);
      other.clients.note('client-b');
      other.clients.goodbye('client-c');
      expect(other.clients.takeReport()).toEqual({ seen: [['client-b', undefined]], gone: ['client-c'] });
      expect(other.clients.takeReport()).toEqual({ seen: [], gone: [] });
      channel.deliver({ sluice: 'clients', count: 5 });
      expect(other.clients.count()).toBe(5);
      other.close();
    } finally {
      link.close();
    }
  });
});
