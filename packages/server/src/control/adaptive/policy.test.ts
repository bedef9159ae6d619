import { Limiter, ManualClock, MemoryStore, type OutcomeTotals } from '@sluice/core';
import { compileRules, type AdaptiveRule } from '@sluice/rules';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryDemandStore } from './demand-store.js';
import { judgeAdaptive, type AdaptiveMove, type IntervalDemand } from './policy.js';
import { DemandRecorder } from './recorder.js';

const SEC = 1000;
const MIN = 60 * SEC;

function rule(adaptive: string, limit = 100): AdaptiveRule {
  const text = `resources:\n  api:x:\n    limits: { algorithm: sliding-window, limit: ${limit}, windowMs: 1000 }\nadaptive:\n  api:x: ${adaptive}\n`;
  return compileRules(text, { file: 'rules.yaml' }).adaptive['api:x']!;
}

function interval(start: number, fields: Partial<IntervalDemand>): IntervalDemand {
  return { start, decided: 0, rejected: 0, peakShare: 0, waits: 0, waitedMs: 0, ...fields };
}

/** Every interval from `from` to `to` (exclusive), as `make` says. */
function intervals(from: number, to: number, step: number, make: (start: number) => Partial<IntervalDemand>): IntervalDemand[] {
  const out: IntervalDemand[] = [];
  for (let s = from; s < to; s += step) out.push(interval(s, make(s)));
  return out;
}

describe("the demand policy (the defaults are the seed's)", () => {
  const demand = rule('{ min: 50, max: 1000, policy: demand }');

  it('raises 20% after 5 minutes of over 5% rejections with short waits, 10% with long ones', () => {
    const now = 10 * MIN;
    const busy = intervals(5 * MIN, now, MIN, () => ({ decided: 1000, rejected: 80, waits: 10, waitedMs: 500 }));
    expect(judgeAdaptive(demand, { limit: 100 }, { intervals: busy }, now)).toMatchObject({
      from: 100,
      to: 120,
      direction: 'up',
    });
    const slow = busy.map((i) => ({ ...i, waitedMs: 2000 }));
    const move = judgeAdaptive(demand, { limit: 100 }, { intervals: slow }, now);
    expect(move).toMatchObject({ to: 110 });
    expect(move?.reason).toMatch(/rejections 8\.0% \(400 of 5000\) > 5\.0%.*mean wait 200 ms >= 100 ms: \+10\.0%/);
  });

  it('does not raise on four minutes, on a gap, or on one calm minute among busy ones', () => {
    const now = 10 * MIN;
    const busy = (s: number) => ({ decided: 1000, rejected: s === 7 * MIN ? 10 : 80 });
    expect(
      judgeAdaptive(demand, { limit: 100 }, { intervals: intervals(6 * MIN, now, MIN, () => busy(0)) }, now),
    ).toBeUndefined();
    const gap = intervals(5 * MIN, now, MIN, () => busy(0)).filter((i) => i.start !== 8 * MIN);
    expect(judgeAdaptive(demand, { limit: 100 }, { intervals: gap }, now)).toBeUndefined();
    expect(judgeAdaptive(demand, { limit: 100 }, { intervals: intervals(5 * MIN, now, MIN, busy) }, now)).toBeUndefined();
  });

  it('lowers 15% after 30 minutes in which even the peak use stayed under 30%', () => {
    const now = 40 * MIN;
    const idle = intervals(10 * MIN, now, MIN, () => ({ decided: 100, peakShare: 0.2 }));
    const move = judgeAdaptive(demand, { limit: 100 }, { intervals: idle }, now);
    expect(move).toMatchObject({ from: 100, to: 85, direction: 'down' });
    const onePeak = idle.map((i) => (i.start === 20 * MIN ? { ...i, peakShare: 0.5 } : i));
    expect(judgeAdaptive(demand, { limit: 100 }, { intervals: onePeak }, now)).toBeUndefined();
  });

  it('stays within [min, max], waits out the cooldown and judges only what came after the last move', () => {
    const now = 10 * MIN;
    const busy = intervals(0, now, MIN, () => ({ decided: 1000, rejected: 500 }));
    expect(judgeAdaptive(demand, { limit: 990 }, { intervals: busy }, now)?.to).toBe(1000);
    expect(judgeAdaptive(demand, { limit: 1000 }, { intervals: busy }, now)).toBeUndefined();
    expect(judgeAdaptive(demand, { limit: 100, lastMoveAt: now - 4 * MIN }, { intervals: busy }, now)).toBeUndefined();
    // Out of cooldown, but only four intervals since the move.
    expect(
      judgeAdaptive(demand, { limit: 100, lastMoveAt: now - 4.5 * MIN }, { intervals: busy }, now + 0.6 * MIN),
    ).toBeUndefined();
    expect(judgeAdaptive(demand, { limit: 100, lastMoveAt: 5 * MIN }, { intervals: busy }, now)?.to).toBe(120);
    const idle = intervals(0, 40 * MIN, MIN, () => ({ peakShare: 0 }));
    expect(judgeAdaptive(demand, { limit: 55 }, { intervals: idle }, 40 * MIN)?.to).toBe(50);
    expect(judgeAdaptive(demand, { limit: 50 }, { intervals: idle }, 40 * MIN)).toBeUndefined();
  });
});

describe('the aimd policy', () => {
  const aimd = rule('{ min: 20, max: 400, policy: aimd, aimd: { increase: 10, latencyAboveMs: 200 } }');
  const outcomes = (calls: number, failures: number, meanMs = 50): OutcomeTotals => ({
    calls,
    failures,
    slow: 0,
    totalDurationMs: calls * meanMs,
  });
  const now = 10 * MIN;
  const binding = [interval(9 * MIN, { decided: 100, rejected: 5 })];

  it('cuts by 0.7 when the error ratio passes 10% or the mean latency its bound', () => {
    expect(judgeAdaptive(aimd, { limit: 100 }, { intervals: binding, outcomes: outcomes(100, 11) }, now)).toMatchObject({
      to: 70,
      direction: 'down',
    });
    const slow = judgeAdaptive(aimd, { limit: 100 }, { intervals: binding, outcomes: outcomes(100, 0, 300) }, now);
    expect(slow?.reason).toMatch(/mean latency 300 ms > 200 ms/);
  });

  it('adds while healthy and the limit binds, and not with too few reports or no rejections', () => {
    expect(judgeAdaptive(aimd, { limit: 100 }, { intervals: binding, outcomes: outcomes(100, 2) }, now)?.to).toBe(110);
    expect(judgeAdaptive(aimd, { limit: 100 }, { intervals: binding, outcomes: outcomes(10, 5) }, now)).toBeUndefined();
    const free = [interval(9 * MIN, { decided: 100 })];
    expect(judgeAdaptive(aimd, { limit: 100 }, { intervals: free, outcomes: outcomes(100, 0) }, now)).toBeUndefined();
    expect(judgeAdaptive(aimd, { limit: 100 }, { intervals: binding }, now)).toBeUndefined();
  });
});

describe('against simulated demand and downstream (manual clock)', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0)) await c();
  });

  /**
   * Runs callers at `rate(t)` calls/s against a limiter whose adaptive limit the policy moves,
   * judged once a second. `downstream(limit)` gives the outcomes of one interval for the aimd
   * policy. Returns the moves.
   */
  async function simulate(
    adaptive: AdaptiveRule,
    start: number,
    seconds: number,
    rate: number,
    downstream?: (admittedInInterval: number) => OutcomeTotals,
  ) {
    const clock = new ManualClock(0);
    const limiter = new Limiter({ resources: {}, store: new MemoryStore({ clock }), clock });
    const demand = new MemoryDemandStore(() => clock.now());
    const recorder = new DemandRecorder({ store: demand, now: () => clock.now(), flushMs: 3_600_000 });
    cleanups.push(
      () => recorder.close(),
      () => limiter.close(),
    );
    recorder.track({ 'api:x': adaptive });
    const iv = adaptive.intervalMs;
    let limit = start;
    const setLimit = () =>
      limiter.setLimits('api:x', { limits: [{ algorithm: 'sliding-window', limit, windowMs: 1000, slices: 10 }] });
    setLimit();
    const moves: (AdaptiveMove & { at: number })[] = [];
    let lastMoveAt: number | undefined;
    const admitted = new Map<number, number>();
    for (let t = 0; t < seconds; t++) {
      for (let i = 0; i < rate; i++) {
        clock.advance(t * 1000 + Math.floor(((i + 1) * 1000) / rate) - clock.now());
        const decision = await limiter.try('api:x', { key: 'k' });
        recorder.observer.decided?.({ resource: 'api:x', mode: 'try', decision, durationMs: 0 });
        const at = Math.floor(clock.now() / iv) * iv;
        if (decision.allowed) admitted.set(at, (admitted.get(at) ?? 0) + 1);
      }
      await recorder.flush();
      const now = clock.now();
      const from = now - Math.max(adaptive.demand.rejectForMs, adaptive.demand.idleForMs) - iv;
      const outcomes = downstream?.(admitted.get(Math.floor(now / iv) * iv - iv) ?? 0);
      const move = judgeAdaptive(
        adaptive,
        { limit, ...(lastMoveAt === undefined ? {} : { lastMoveAt }) },
        { intervals: await demand.read('api:x', iv, from, now), ...(outcomes ? { outcomes } : {}) },
        now,
      );
      if (move === undefined) continue;
      moves.push({ ...move, at: now });
      limit = move.to;
      lastMoveAt = now;
      setLimit();
    }
    return { moves, limit };
  }

  it('raises a too-low limit until rejections fall under 5%, then lowers it when demand drops', async () => {
    // The seed's policy with its spans shortened ten-fold: 30 s of rejections, 3 min of idleness.
    const adaptive = rule(
      '{ min: 20, max: 400, policy: demand, intervalMs: 5000, cooldownMs: 30000, demand: { rejectForMs: 30000, idleForMs: 180000 } }',
    );
    const busy = await simulate(adaptive, 100, 300, 150);
    expect(busy.moves.length).toBeGreaterThanOrEqual(2);
    expect(busy.moves.every((m) => m.direction === 'up')).toBe(true);
    // 100 -> 120 -> 144: rejections of 150/s are then under 5%, and it stops.
    expect(busy.limit).toBeGreaterThanOrEqual(150 * 0.95);
    expect(busy.limit).toBeLessThan(150 * 1.2 + 1);
    expect(busy.moves[0]!.at).toBeGreaterThanOrEqual(30_000);
    for (let i = 1; i < busy.moves.length; i++) expect(busy.moves[i]!.at - busy.moves[i - 1]!.at).toBeGreaterThanOrEqual(30_000);

    const quiet = await simulate(adaptive, busy.limit, 1200, 20);
    expect(quiet.moves.every((m) => m.direction === 'down')).toBe(true);
    // Lowered while even the peak use (20 of the limit) is under 30%: it ends within 15% of 20/0.3.
    expect(quiet.limit).toBeLessThanOrEqual(Math.ceil(20 / 0.3));
    expect(quiet.limit).toBeGreaterThanOrEqual(Math.floor((20 / 0.3) * 0.85));
    expect(quiet.moves[0]!.at).toBeGreaterThanOrEqual(180_000);
  });

  it('aimd settles under a downstream that fails beyond its capacity', async () => {
    const capacity = 120;
    const adaptive = rule('{ min: 20, max: 400, policy: aimd, intervalMs: 5000, aimd: { increase: 10 } }');
    // Demand far above the limit; the downstream fails whatever it gets beyond 120/s.
    const downstream = (admitted: number): OutcomeTotals => {
      const perSec = admitted / 5;
      const failures = perSec === 0 ? 0 : Math.round(admitted * Math.max(0, (perSec - capacity) / perSec));
      return { calls: admitted, failures, slow: 0, totalDurationMs: admitted * 20 };
    };
    const run = await simulate(adaptive, 40, 600, 200, downstream);
    const ups = run.moves.filter((m) => m.direction === 'up').length;
    const downs = run.moves.filter((m) => m.direction === 'down').length;
    expect(ups).toBeGreaterThan(5);
    expect(downs).toBeGreaterThanOrEqual(1);
    // After the first cut, the limit saw-tooths between ~0.7 x the capacity and one step above
    // the highest healthy limit (capacity / 0.9, where failures reach 10%).
    const firstCut = run.moves.findIndex((m) => m.direction === 'down');
    for (const m of run.moves.slice(firstCut)) {
      expect(m.to).toBeGreaterThanOrEqual(Math.floor(capacity * 0.7) - 10);
      expect(m.to).toBeLessThanOrEqual(capacity / (1 - 0.1) + 2 * 10);
    }
  });
});
