import { compileRules as compileRuleText } from '@sluice/rules';
import { describe, expect, it, vi } from 'vitest';
import { EventOutcome, MemoryTransport, decodeDecisions, encodeEvents, encodeTallies, hashValue } from '@sluice/stream';
import type { GatewayEvent, GovernanceDecision, RejectionTally } from '@sluice/stream';
import { MemoryOwnershipStore } from '../ownership/store.js';
import { Aggregator } from './aggregator.js';
import { DecisionTracker } from './decisions.js';
import { PartitionState } from './partition-state.js';
import { compileRules } from './rules.js';
import { windowRequests } from './window.js';

const T0 = 1_700_000_000_000;
const API = hashValue('api');
const SEARCH = hashValue('/search');
const TICK_MS = 100;
const WINDOW_MS = 1000;

const RULES = `
governance:
  rules:
    search-burst:
      type: threshold
      dimension: path
      match: { path: /search }
      limit: 200
      blockMs: 5000
    login-failures:
      type: correlated
      dimension: path
      match: { path: /search, status: [401] }
      limit: 10
      blockMs: 5000
    busy-users:
      type: threshold
      dimension: user
      limit: 1000
    whole-api:
      type: threshold
      dimension: resource
      limit: 100000
`;

function state(): PartitionState {
  return new PartitionState(0, compileRules(compileRuleText(RULES, { file: 'rules.yaml' }).governance), 10_000);
}

function event(timestampMs: number): GatewayEvent {
  return { resource: API, path: SEARCH, user: 0, ip: 0, tenant: 0, timestampMs, status: 200, outcome: EventOutcome.PASSED };
}

function tally(count: number, lastMs: number, spanMs = 0): RejectionTally {
  return { resource: API, path: SEARCH, dimension: 'path', value: SEARCH, count, lastMs, spanMs };
}

interface Run {
  /** When the block was first sent, and when it was lifted (ms after T0). */
  blockAt: number | undefined;
  liftAt: number | undefined;
  /** Requests that passed after the block was first sent and before the burst ended. */
  passedWhileBlocked: number;
  /** Blocks sent again while the block was on. */
  refreshes: number;
}

/**
 * A gateway and an aggregator on the manual clock: `rate` requests/s on /search for `burstMs`;
 * the gateway rejects while it holds a block, counting the rejections (unless `tallies` is
 * false) and flushing every 10 ms; the aggregator ticks every 100 ms; decisions arrive at once.
 */
function simulate(rate: number, burstMs: number, runMs: number, tallies = true): Run {
  const s = state();
  const tracker = new DecisionTracker({ ttlMs: 3000, refreshMs: 1000 });
  const run: Run = { blockAt: undefined, liftAt: undefined, passedWhileBlocked: 0, refreshes: 0 };
  let blocked = false;
  let sent = 0;
  for (let t = 0; t <= runMs; t += 10) {
    const now = T0 + t;
    if (t < burstMs) {
      // Requests due by now at `rate`, in this 10 ms step.
      const due = Math.floor(((t + 10) * rate) / 1000) - sent;
      sent += due;
      if (blocked) {
        if (tallies && due > 0) s.ingestTallies([tally(due, now, 9)], now);
      } else {
        s.ingest(
          Array.from({ length: due }, () => event(now)),
          now,
        );
        if (run.blockAt !== undefined) run.passedWhileBlocked += due;
      }
    }
    if (t % TICK_MS === 0) {
      s.evaluate(now);
      for (const d of tracker.update(s.holds(), now)) {
        if (d.action === 'block') {
          if (blocked) run.refreshes++;
          blocked = true;
          run.blockAt ??= t;
        } else {
          blocked = false;
          run.liftAt ??= t;
        }
      }
    }
  }
  return run;
}

describe('offered load: rejected requests keep a block in force', () => {
  it('holds a block through a burst three times the block time, refreshed, and lifts within windowMs + tickMs of its end', () => {
    const burstMs = 16_000;
    const run = simulate(600, burstMs, 20_000);
    expect(run.blockAt).toBeLessThan(1000);
    expect(run.passedWhileBlocked).toBe(0);
    expect(run.refreshes).toBeGreaterThanOrEqual(14);
    expect(run.liftAt).toBeGreaterThan(burstMs);
    expect(run.liftAt! - burstMs).toBeLessThanOrEqual(WINDOW_MS + TICK_MS);
  });

  it('without rejection counts the same burst is let through again mid-burst (what the counts fix)', () => {
    const run = simulate(600, 16_000, 20_000, false);
    expect(run.liftAt).toBeLessThan(16_000);
    expect(run.passedWhileBlocked).toBeGreaterThan(0);
  });

  it('holds while offered load stays just over the limit, and not past blockMs once it falls below', () => {
    const over = simulate(260, 16_000, 20_000);
    expect(over.passedWhileBlocked).toBe(0);
    expect(over.liftAt).toBeGreaterThan(16_000);
    // A short burst: the block lasts its blockMs from the start, then lifts at the next tick.
    const short = simulate(600, 1500, 10_000);
    expect(short.liftAt! - short.blockAt!).toBeGreaterThanOrEqual(5000);
    expect(short.liftAt! - short.blockAt!).toBeLessThanOrEqual(5000 + TICK_MS);
  });

  it('counts a tally only in rules that count every request and whose conditions it meets', () => {
    const s = state();
    s.ingestTallies([tally(300, T0)], T0);
    expect(s.counters.rejected).toBe(300);
    s.evaluate(T0);
    // The /search threshold and the resource-wide rule count it; the 401 rule and the user rule do not.
    expect([...s.holds().values()].map((h) => h.ruleId)).toEqual(['search-burst']);
    expect(s.table('whole-api')!.size).toBe(1);
    expect(s.table('login-failures')!.size).toBe(0);
    expect(s.table('busy-users')!.size).toBe(0);
    // A user block's tally counts for the user rule (and the resource), not the path rules.
    const u = state();
    u.ingestTallies([{ ...tally(1500, T0), dimension: 'user', value: 42, path: hashValue('/other') }], T0);
    u.evaluate(T0);
    expect([...u.holds().values()].map((h) => h.ruleId)).toEqual(['busy-users']);
    expect(u.table('search-burst')!.size).toBe(0);
  });

  it('spreads a tally over the slices it spans, and skips one older than the window', () => {
    const s = state();
    const now = T0 + 5000;
    // 300 over 300 ms: with 100 ms slices, 75 land in each of the 4 slices it touches.
    s.ingestTallies([tally(300, now, 300)], now);
    const rule = s.rules.find((r) => r.id === 'search-burst')!;
    const w = s.table('search-burst')!.get(SEARCH)!;
    expect(windowRequests(w, rule.shape, now)).toBe(300);
    expect(windowRequests(w, rule.shape, now + 800)).toBe(150);
    expect(windowRequests(w, rule.shape, now + 900)).toBe(75);
    // 10 over 4 slices: whole shares, the remainder in the newest.
    const odd = state();
    odd.ingestTallies([tally(10, now, 300)], now);
    const ow = odd.table('search-burst')!.get(SEARCH)!;
    expect([now - 300, now - 200, now - 100, now].map((t) => windowRequests(ow, rule.shape, t))).toEqual([2, 4, 7, 10]);
    const late = state();
    late.ingestTallies([tally(500, T0)], T0 + 2000);
    expect(late.counters).toMatchObject({ rejected: 0, late: 1 });
  });
});

describe('Aggregator and rejection tallies', () => {
  it('counts tally batches from the stream and keeps the block they hold back', async () => {
    let now = T0;
    const transport = new MemoryTransport({ partitions: 1 });
    const decisions: GovernanceDecision[] = [];
    await transport.subscribeDecisions((m) => void decisions.push(...decodeDecisions(m)));
    const a = new Aggregator({
      transport,
      rules: compileRuleText(RULES, { file: 'rules.yaml' }).governance,
      ownership: new MemoryOwnershipStore({ now: () => now }),
      tickMs: 60_000,
      snapshotMs: 0,
      now: () => now,
    });
    try {
      await a.start();
      await transport.publish(0, encodeEvents(Array.from({ length: 201 }, () => event(now))));
      await vi.waitFor(() => expect(a.stats().events).toBe(201));
      expect((await a.tick()).map((d) => d.action)).toEqual(['block']);
      // From here the gateways only reject: 600/s, counted in tallies every 10 ms.
      for (let t = 10; t <= 12_000; t += 10) {
        now = T0 + t;
        await transport.publish(0, encodeTallies([tally(6, now, 9)]));
        // Each batch is read at the time it was sent (the manual clock does not wait for it).
        while (a.stats().tallyBatches < t / 10) await new Promise((r) => setImmediate(r));
        if (t % 1000 === 0) {
          expect((await a.tick()).map((d) => d.action)).toEqual(['block']);
        }
      }
      expect(a.stats()).toMatchObject({ rejected: 7200, malformedBatches: 0, activeBlocks: 1 });
      // The rejections stop: the lift comes once the window has drained.
      now += WINDOW_MS + TICK_MS;
      expect((await a.tick()).map((d) => d.action)).toEqual(['lift']);
      await vi.waitFor(() => expect(decisions.filter((d) => d.action === 'lift')).toHaveLength(1));
    } finally {
      await a.close();
      await transport.close();
    }
  });

  it('keeps the block while the stream delivers its tallies in lumps, and lifts within windowMs + tickMs + its silences after the last', async () => {
    const LUMP_MS = 800;
    let now = T0;
    const transport = new MemoryTransport({ partitions: 1 });
    const a = new Aggregator({
      transport,
      rules: compileRuleText(RULES, { file: 'rules.yaml' }).governance,
      ownership: new MemoryOwnershipStore({ now: () => now }),
      tickMs: 60_000,
      snapshotMs: 0,
      now: () => now,
    });
    try {
      await a.start();
      await transport.publish(0, encodeEvents(Array.from({ length: 201 }, () => event(now))));
      await vi.waitFor(() => expect(a.stats().events).toBe(201));
      expect((await a.tick()).map((d) => d.action)).toEqual(['block']);
      // 600 rejections a second; the stream hands them over every LUMP_MS, all at once.
      const actions: string[] = [];
      let published = 0;
      let lump: number[] = [];
      for (let t = 10; t <= 12_000; t += 10) {
        now = T0 + t;
        lump.push(now);
        if (t % LUMP_MS === 0) {
          for (const at of lump) await transport.publish(0, encodeTallies([tally(6, at, 9)]));
          published += lump.length;
          lump = [];
          while (a.stats().tallyBatches < published) await new Promise((r) => setImmediate(r));
        }
        if (t % TICK_MS === 0) actions.push(...(await a.tick()).map((d) => d.action));
      }
      expect(actions).not.toContain('lift');
      const lastRead = T0 + 12_000 - (12_000 % LUMP_MS);
      let liftAt: number | undefined;
      for (now = T0 + 12_000 + TICK_MS; liftAt === undefined && now <= lastRead + 10_000; now += TICK_MS) {
        if ((await a.tick()).some((d) => d.action === 'lift')) liftAt = now;
      }
      expect(liftAt! - lastRead).toBeLessThanOrEqual(WINDOW_MS + TICK_MS + LUMP_MS);
    } finally {
      await a.close();
      await transport.close();
    }
  });

  it('does not lift a block at the first tick after the aggregator stalled, before it read what the stall held up', async () => {
    let now = T0;
    const transport = new MemoryTransport({ partitions: 1 });
    // Every decision broadcast, whichever tick (the test's or the timer's) sent it.
    const decisions: GovernanceDecision[] = [];
    await transport.subscribeDecisions((m) => void decisions.push(...decodeDecisions(m)));
    const a = new Aggregator({
      transport,
      rules: compileRuleText(RULES, { file: 'rules.yaml' }).governance,
      ownership: new MemoryOwnershipStore({ now: () => now }),
      tickMs: TICK_MS,
      snapshotMs: 0,
      now: () => now,
    });
    const read = async (n: number) => {
      while (a.stats().tallyBatches < n) await new Promise((r) => setImmediate(r));
    };
    try {
      await a.start();
      await transport.publish(0, encodeEvents(Array.from({ length: 201 }, () => event(now))));
      await vi.waitFor(() => expect(a.stats().events).toBe(201));
      const actions: string[] = [...(await a.tick()).map((d) => d.action)];
      let batches = 0;
      const flood = async (fromMs: number, toMs: number, tickEvery: boolean) => {
        for (let t = fromMs; t <= toMs; t += 10) {
          now = T0 + t;
          await transport.publish(0, encodeTallies([tally(6, now, 9)]));
          await read(++batches);
          if (tickEvery && t % TICK_MS === 0) actions.push(...(await a.tick()).map((d) => d.action));
        }
      };
      await flood(10, 6000, true);
      // The process stalls for 1.5 s (more than the window): the gateways go on rejecting, but
      // nothing is read or evaluated until it resumes, and its first tick comes before the reads.
      const stalledAt = now;
      now = stalledAt + 1500;
      actions.push(...(await a.tick()).map((d) => d.action));
      const held: { t: number; n: number }[] = [];
      for (let t = 10; t <= 1500; t += 10) held.push({ t: stalledAt - T0 + t, n: 6 });
      for (const h of held) await transport.publish(0, encodeTallies([tally(h.n, T0 + h.t, 9)]));
      batches += held.length;
      await read(batches);
      await flood(now - T0 + 10, 9000, true);
      await new Promise((r) => setImmediate(r));
      expect(actions).not.toContain('lift');
      expect(decisions.filter((d) => d.action === 'lift')).toEqual([]);
      expect(decisions.length).toBeGreaterThan(5);
      expect(a.stats().activeBlocks).toBe(1);
    } finally {
      await a.close();
      await transport.close();
    }
  });

  it('keeps the block while the stream delivers its tallies later than the window, and lifts once the watermark has passed the window', async () => {
    const LAG_MS = 1500;
    let now = T0;
    const transport = new MemoryTransport({ partitions: 1 });
    const a = new Aggregator({
      transport,
      rules: compileRuleText(RULES, { file: 'rules.yaml' }).governance,
      ownership: new MemoryOwnershipStore({ now: () => now }),
      tickMs: 60_000,
      snapshotMs: 0,
      now: () => now,
    });
    try {
      await a.start();
      await transport.publish(0, encodeEvents(Array.from({ length: 201 }, () => event(now))));
      await vi.waitFor(() => expect(a.stats().events).toBe(201));
      expect((await a.tick()).map((d) => d.action)).toEqual(['block']);
      // 600 rejections a second, each tally read LAG_MS after its last rejection: at `now` the
      // window holds none of them, at the watermark it holds them all.
      const actions: string[] = [];
      for (let t = 10; t <= 12_000; t += 10) {
        now = T0 + t;
        if (t > LAG_MS) {
          await transport.publish(0, encodeTallies([tally(6, now - LAG_MS, 9)]));
          while (a.stats().tallyBatches < (t - LAG_MS) / 10) await new Promise((r) => setImmediate(r));
        }
        if (t % TICK_MS === 0) actions.push(...(await a.tick()).map((d) => d.action));
      }
      expect(actions).not.toContain('lift');
      expect(actions.filter((x) => x === 'block').length).toBeGreaterThanOrEqual(10);
      expect(a.stats()).toMatchObject({ rejected: (12_000 - LAG_MS) * 0.6, lateEvents: 0, activeBlocks: 1 });
      expect(a.stats().partitions[0]!.lagMs).toBe(LAG_MS);
      // Nothing more is read: the watermark moves on from the last tally, and the lift comes
      // within windowMs + tickMs of that tally's reading.
      const lastRead = now;
      let liftAt: number | undefined;
      for (now = lastRead + TICK_MS; liftAt === undefined && now <= lastRead + 10_000; now += TICK_MS) {
        if ((await a.tick()).some((d) => d.action === 'lift')) liftAt = now;
      }
      expect(liftAt! - lastRead).toBeGreaterThan(WINDOW_MS - LAG_MS);
      expect(liftAt! - lastRead).toBeLessThanOrEqual(WINDOW_MS + TICK_MS);
    } finally {
      await a.close();
      await transport.close();
    }
  });
});
