import { compileRules as compileRuleText, type RuleListener, type RuleStore, type RuleVersion } from '@sluice/rules';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  EventOutcome,
  MemoryTransport,
  decodeDecisions,
  encodeEvents,
  hashValue,
  type GatewayEvent,
  type GovernanceDecision,
} from '@sluice/stream';
import { MemoryOwnershipStore } from '../ownership/store.js';
import { Aggregator } from './aggregator.js';
import type { AggregatorOptions } from './options.js';

const T0 = 1_700_000_000_000;
const RULES = `
governance:
  rules:
    search-burst:
      type: threshold
      dimension: path
      limit: 20
      blockMs: 2000
    login-failures:
      type: correlated
      dimension: user
      match: { path: /login, status: [401, 403] }
      limit: 10
      windowMs: 300000
      blockMs: 600000
`;
const governance = (text = RULES) => compileRuleText(text, { file: 'rules.yaml' }).governance;

function event(over: Partial<GatewayEvent> & { timestampMs: number }): GatewayEvent {
  return {
    resource: hashValue('api'),
    path: hashValue('/search'),
    user: 0,
    ip: 0,
    tenant: 0,
    status: 200,
    outcome: EventOutcome.PASSED,
    ...over,
  };
}

class Harness {
  now = T0;
  readonly transport = new MemoryTransport({ partitions: 1 });
  readonly store = new MemoryOwnershipStore({ now: () => this.now });
  readonly decisions: GovernanceDecision[] = [];
  readonly aggregators: Aggregator[] = [];

  async subscribe(): Promise<void> {
    await this.transport.subscribeDecisions((m) => this.decisions.push(...decodeDecisions(m)));
  }

  aggregator(over: Partial<AggregatorOptions> = {}): Aggregator {
    const a = new Aggregator({
      transport: this.transport,
      rules: governance(),
      ownership: this.store,
      tickMs: 60_000,
      snapshotMs: 0,
      now: () => this.now,
      ...over,
    });
    this.aggregators.push(a);
    return a;
  }

  async publish(events: GatewayEvent[]): Promise<void> {
    await this.transport.publish(0, encodeEvents(events));
  }

  async close(): Promise<void> {
    for (const a of this.aggregators) await a.close();
    await this.transport.close();
  }
}

let h: Harness;
afterEach(async () => {
  await h.close();
});

async function settled(a: Aggregator, batches: number): Promise<void> {
  await vi.waitFor(() =>
    expect(a.stats().batches + a.stats().malformedBatches + a.stats().shedBatches).toBeGreaterThanOrEqual(batches),
  );
}

describe('Aggregator', () => {
  it('blocks a path over its threshold, refreshes the block while it holds and lifts it when it clears', async () => {
    h = new Harness();
    await h.subscribe();
    const a = h.aggregator();
    await a.start();
    expect(a.partitions).toEqual([0]);
    await h.publish(Array.from({ length: 20 }, () => event({ timestampMs: h.now })));
    await settled(a, 1);
    expect(await a.tick()).toEqual([]);
    await h.publish([event({ timestampMs: h.now })]);
    await settled(a, 2);
    const [block] = await a.tick();
    expect(block).toMatchObject({
      action: 'block',
      dimension: 'path',
      value: hashValue('/search'),
      ttlMs: 3000,
      ruleId: 'search-burst',
    });
    expect(block!.retryAfterMs).toBe(2000);
    // Nothing new before the refresh is due; the same block again once it is.
    h.now += 500;
    expect(await a.tick()).toEqual([]);
    h.now += 500;
    expect((await a.tick()).map((d) => d.action)).toEqual(['block']);
    // The window emptied and the hold ran out: an explicit lift.
    h.now += 1500;
    expect((await a.tick()).map((d) => d.action)).toEqual(['lift']);
    await vi.waitFor(() => expect(h.decisions.map((d) => d.action)).toEqual(['block', 'block', 'lift']));
    expect(a.stats()).toMatchObject({ blocksSent: 2, liftsSent: 1, activeBlocks: 0 });
  });

  it('blocks a user with more than 10 failed logins in 5 minutes, on every path', async () => {
    h = new Harness();
    const a = h.aggregator();
    await a.start();
    const login = (user: string, status: number, at: number) =>
      event({ path: hashValue('/login'), user: hashValue(user), status, timestampMs: at });
    // 10 failures spread over 3 minutes; successes, another user's failures and failures on
    // other paths do not count.
    for (let i = 0; i < 10; i++) {
      await h.publish([
        login('mallory', i % 2 === 0 ? 401 : 403, h.now),
        login('mallory', 200, h.now),
        login('alice', 401, h.now),
      ]);
      await h.publish([event({ user: hashValue('mallory'), status: 401, timestampMs: h.now })]);
      await settled(a, 2 * (i + 1));
      h.now += 20_000;
    }
    expect(a.stats().shedBatches).toBe(0);
    expect(await a.tick()).toEqual([]);
    await h.publish([login('mallory', 401, h.now)]);
    await settled(a, 21);
    const decisions = await a.tick();
    expect(decisions).toEqual([
      expect.objectContaining({
        action: 'block',
        dimension: 'user',
        value: hashValue('mallory'),
        ruleId: 'login-failures',
        retryAfterMs: 600_000,
      }),
    ]);
  });

  it('skips foreign and truncated batches without stopping the partition', async () => {
    h = new Harness();
    const a = h.aggregator();
    await a.start();
    const good = encodeEvents(Array.from({ length: 21 }, () => event({ timestampMs: h.now })));
    await h.transport.publish(0, new Uint8Array([1, 2, 3]));
    await h.transport.publish(0, good.subarray(0, good.length - 5));
    await h.transport.publish(0, good);
    await settled(a, 3);
    expect(a.stats()).toMatchObject({ malformedBatches: 2, batches: 1, events: 21 });
    expect((await a.tick()).map((d) => d.action)).toEqual(['block']);
  });

  it('follows the rule store: a new version applies without a restart', async () => {
    h = new Harness();
    let listener: RuleListener | undefined;
    const version = (n: number, text: string): RuleVersion => {
      const ruleSet = compileRuleText(text, { file: 'rules.yaml' });
      return {
        version: n,
        author: 't',
        reason: 't',
        createdAt: '',
        hash: ruleSet.hash,
        file: 'rules.yaml',
        source: text,
        ruleSet,
      };
    };
    const store = {
      watch: (l: RuleListener) => ((listener = l), () => (listener = undefined)),
      current: () => Promise.resolve(undefined),
    };
    const a = h.aggregator({ rules: store as unknown as RuleStore });
    await a.start();
    listener!(version(1, RULES));
    await h.publish(Array.from({ length: 15 }, () => event({ timestampMs: h.now })));
    await settled(a, 1);
    expect(await a.tick()).toEqual([]);
    listener!(version(2, RULES.replace('limit: 20', 'limit: 10')));
    // The window survives the change (same counting), only the limit moved.
    expect((await a.tick()).map((d) => d.ruleId)).toEqual(['search-burst']);
    expect(a.stats().ruleVersion).toBe(2);
    // A version without the rule lifts its block.
    listener!(version(3, RULES.replace(/ {4}search-burst:[\s\S]*?blockMs: 2000\n/, '')));
    expect((await a.tick()).map((d) => d.action)).toEqual(['lift']);
  });

  it('samples lagging partitions with weights, and sheds batches far behind', async () => {
    h = new Harness();
    // A 5-minute window, so events seconds old still count when sampled.
    const rules = governance(RULES.replace('limit: 20', 'limit: 20\n      windowMs: 300000\n      slices: 10'));
    expect(rules['search-burst']!.windowMs).toBe(300_000);
    const b = h.aggregator({ rules, sampleLagMs: 5000, shedLagMs: 60_000, sampleEvery: 4 });
    await b.start();
    // 24 events 10 s old: sampled, 6 counted with weight 4 -> 24 > 20.
    await h.publish(Array.from({ length: 24 }, () => event({ timestampMs: h.now - 10_000 })));
    // Events 2 minutes old: shed unread.
    await h.publish(Array.from({ length: 50 }, () => event({ timestampMs: h.now - 120_000 })));
    await settled(b, 2);
    expect(b.stats()).toMatchObject({ sampledBatches: 1, shedBatches: 1, events: 6 });
    expect(b.stats().partitions[0]!.mode).toBe('shed');
    expect((await b.tick()).map((d) => d.action)).toEqual(['block']);
  });

  it('hands a partition over with its windows and holds when its owner gives it up', async () => {
    h = new Harness();
    await h.subscribe();
    const first = h.aggregator({ id: 'first' });
    await first.start();
    await h.publish(Array.from({ length: 15 }, () => event({ timestampMs: h.now })));
    await settled(first, 1);
    const second = h.aggregator({ id: 'second' });
    await second.start();
    expect(second.partitions).toEqual([]);
    await first.close();
    expect(h.store.holder(0)).toBeUndefined();
    // The next ownership round of `second` takes the free partition and restores the snapshot.
    await second.rebalance();
    expect(second.partitions).toEqual([0]);
    expect(second.stats().snapshotsRestored).toBe(1);
    await h.publish(Array.from({ length: 6 }, () => event({ timestampMs: h.now })));
    await settled(second, 1);
    expect((await second.tick()).map((d) => d.action)).toEqual(['block']);
  });

  it('stops a consumer that finished starting after its partition was lost', async () => {
    h = new Harness();
    let open: () => void = () => {};
    const gate = new Promise<void>((resolve) => (open = resolve));
    const consume = h.transport.consume.bind(h.transport);
    let starts = 0;
    let stops = 0;
    // Starting to consume takes as long as the test wants (a broker client's start-up).
    vi.spyOn(h.transport, 'consume').mockImplementation(async (partition, group, handler) => {
      starts++;
      await gate;
      const sub = await consume(partition, group, handler);
      const stop = sub.stop.bind(sub);
      sub.stop = () => {
        stops++;
        return stop();
      };
      return sub;
    });
    const a = h.aggregator({ id: 'a', ownershipTtlMs: 300 });
    const starting = a.start();
    await vi.waitFor(() => expect(starts).toBe(1));
    // Meanwhile the ownership lapses and another owner takes the partition; a's renewals notice.
    h.now += 1000;
    expect(await h.store.acquire(0, 'b', 60_000)).toBe(true);
    await vi.waitFor(() => expect(a.partitions).toEqual([]));
    open();
    await starting;
    await vi.waitFor(() => expect(stops).toBe(1));
    expect(h.store.holder(0)).toBe('b');
  });

  it('keeps a bounded table under a flood of distinct IPs, evicting and counting', async () => {
    h = new Harness();
    const rules = governance('governance:\n  rules:\n    ip-burst: { type: threshold, dimension: ip, limit: 50 }\n');
    const a = h.aggregator({ rules, maxValues: 100 });
    await a.start();
    for (let b = 0; b < 5; b++) {
      await h.publish(
        Array.from({ length: 1000 }, (_, i) => event({ ip: hashValue(`10.${b}.${i >> 8}.${i & 255}`), timestampMs: h.now })),
      );
    }
    await settled(a, 5);
    const s = a.stats();
    expect(s.partitions[0]!.trackedValues).toBe(100);
    expect(s.evictions).toBe(4900);
    expect(s.events).toBe(5000);
  });
});

describe('Aggregator on a host whose clock is off', () => {
  it('counts events and stamps decisions on the store clock when given the measured skew', async () => {
    h = new Harness();
    // This host's clock runs 5 s ahead of the store's; gateways stamped the events on the store's.
    h.now = T0 + 5000;
    const a = h.aggregator({ clockSkew: { offsetMs: -5000 } });
    await a.start();
    await h.publish(Array.from({ length: 21 }, () => event({ timestampMs: T0 })));
    await settled(a, 1);
    const [block] = await a.tick();
    // Stamped on the store's clock: a gateway checking on the store's clock finds it fresh.
    expect(block).toMatchObject({ action: 'block', ruleId: 'search-burst', issuedAtMs: T0 });
    expect(a.stats().partitions[0]).toMatchObject({ lagMs: 0 });
  });
});
