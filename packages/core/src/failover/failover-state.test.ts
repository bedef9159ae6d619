import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { combineStatuses } from '../shared/decision.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import {
  FailoverMachine,
  answeringPolicy,
  describePolicies,
  fairShare,
  fairShareOf,
  fallbackDecision,
  isLocalPermit,
  localPermitId,
  policyStatuses,
  type FailoverSwitch,
} from './failover-state.js';
import { compileLimit } from '../shared/policy.js';

const timeout = () => new SluiceError(ErrorCodes.STORE_TIMEOUT, 'timed out');
const refused = () => new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'connection refused');

function machine(options: { connectionReported?: boolean } = {}) {
  const clock = new ManualClock();
  const store = { up: true, probes: 0 };
  const logs: string[] = [];
  const switches: FailoverSwitch[] = [];
  const m = new FailoverMachine({
    clock,
    probe: async () => {
      store.probes++;
      if (!store.up) throw refused();
    },
    probeIntervalMs: 50,
    maxProbeIntervalMs: 400,
    subject: 'test store',
    logFields: () => ({ store: 'test' }),
    logger: { info: (_o, msg) => logs.push(`info ${msg}`), warn: (_o, msg) => logs.push(`warn ${msg}`) },
    ...options,
  });
  m.onSwitch((e) => switches.push(e));
  return { clock, store, logs, switches, m };
}

describe('FailoverMachine', () => {
  it('healthy -> down after three timeouts in a row, probing with backoff, healthy again when a probe answers', async () => {
    const { clock, store, logs, switches, m } = machine();
    store.up = false;
    m.failed(timeout(), m.begin());
    m.failed(timeout(), m.begin());
    expect(m.state).toBe('healthy');
    m.failed(timeout(), m.begin());
    expect(m.state).toBe('down');
    expect(m.healthy).toBe(false);
    expect(m.retryAfterMs).toBe(400);
    expect(switches.map((e) => e.healthy)).toEqual([false]);

    // Probes at 50, then 100, 200, 400, 400 ms apart.
    await clock.advanceAsync(50);
    expect(store.probes).toBe(1);
    await clock.advanceAsync(99);
    expect(store.probes).toBe(1);
    await clock.advanceAsync(1);
    expect(store.probes).toBe(2);
    await clock.advanceAsync(200 + 400);
    expect(store.probes).toBe(4);
    expect(m.state).toBe('down');

    store.up = true;
    await clock.advanceAsync(400);
    expect(store.probes).toBe(5);
    expect(m.state).toBe('healthy');
    expect(switches.map((e) => e.healthy)).toEqual([false, true]);
    expect(logs).toEqual([
      "warn test store unreachable (timed out): deciding by each resource's store-failure policy until it answers",
      'info test store answers again after 1.1 s: global decisions resumed (0 decisions made by the fallback meanwhile)',
    ]);
    expect(clock.pendingTimers).toBe(0);
    await m.close();
  });

  it('counts calls in flight together once, and a success ends the streak', () => {
    const { m } = machine();
    const wave = [m.begin(), m.begin(), m.begin()];
    for (const ticket of wave) m.failed(timeout(), ticket);
    expect(m.state).toBe('healthy');
    m.failed(timeout(), m.begin());
    m.succeeded();
    m.failed(timeout(), m.begin());
    m.failed(timeout(), m.begin());
    expect(m.state).toBe('healthy');
    m.failed(timeout(), m.begin());
    expect(m.state).toBe('down');
  });

  it('switches at once on connection loss, unless the store reports its connection itself', () => {
    const lost = machine();
    lost.m.failed(refused(), lost.m.begin());
    expect(lost.m.state).toBe('down');

    const reported = machine({ connectionReported: true });
    reported.m.failed(refused(), reported.m.begin());
    expect(reported.m.state).toBe('healthy');
    reported.m.markDown(refused());
    expect(reported.m.state).toBe('down');
  });

  it('probes at once when told the store is back, and is probing while the probe is in flight', async () => {
    const { clock, store, m } = machine();
    let answer: (() => void) | undefined;
    store.up = false;
    m.markDown(refused());
    store.up = true;
    const slow = new FailoverMachine({
      clock,
      probe: () => new Promise<void>((resolve) => (answer = resolve)),
    });
    slow.markDown(refused());
    slow.probeNow();
    expect(slow.state).toBe('probing');
    slow.probeNow(); // one probe at a time
    answer!();
    await Promise.resolve();
    await Promise.resolve();
    expect(slow.state).toBe('healthy');
    m.probeNow();
    await Promise.resolve();
    await Promise.resolve();
    expect(m.state).toBe('healthy');
    expect(store.probes).toBe(1);
    await slow.close();
    await m.close();
    expect(clock.pendingTimers).toBe(0);
  });

  it('stops probing on close, and a switch after close is ignored', async () => {
    const { clock, store, switches, m } = machine();
    store.up = false;
    m.markDown(refused());
    await m.close();
    expect(clock.pendingTimers).toBe(0);
    await clock.advanceAsync(1000);
    expect(store.probes).toBe(0);
    expect(switches.length).toBe(1);
  });

  it('while the store stays away: a summary every interval with the fallback decisions so far, nothing per failed probe', async () => {
    const clock = new ManualClock();
    const lines: { level: string; fields: object; msg: string }[] = [];
    let up = false;
    const econnrefused = Object.assign(new Error('connect ECONNREFUSED 10.0.0.5:6379'), {
      code: 'ECONNREFUSED',
      syscall: 'connect',
      address: '10.0.0.5',
      port: 6379,
    });
    const m = new FailoverMachine({
      clock,
      probe: async () => {
        if (!up) throw new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'Redis is unavailable', { cause: econnrefused });
      },
      subject: 'store redis at 10.0.0.5:6379',
      policy: () => "the 'local' policy",
      logger: {
        info: (fields, msg) => lines.push({ level: 'info', fields, msg }),
        warn: (fields, msg) => lines.push({ level: 'warn', fields, msg }),
      },
    });
    m.markDown(new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'the connection to Redis closed'));
    for (let i = 0; i < 7; i++) m.fallbackDecided();
    await clock.advanceAsync(30_000);
    for (let i = 0; i < 5; i++) m.fallbackDecided();
    expect(m.outage).toEqual({ lastedMs: 30_000, reason: 'ECONNREFUSED 10.0.0.5:6379', fallbackDecisions: 12 });
    up = true;
    await clock.advanceAsync(500);
    expect(m.healthy).toBe(true);
    expect(m.outage).toBeUndefined();
    expect(m.fallbackDecisions).toBe(12);
    expect(lines.map((l) => `${l.level} ${l.msg}`)).toEqual([
      "warn store redis at 10.0.0.5:6379 unreachable (the connection to Redis closed): deciding by the 'local' policy until it answers",
      "warn store redis at 10.0.0.5:6379 still unreachable after 30.0 s (ECONNREFUSED 10.0.0.5:6379): 7 decisions made by the 'local' policy so far",
      'info store redis at 10.0.0.5:6379 answers again after 30.3 s: global decisions resumed (12 decisions made by the fallback meanwhile)',
    ]);
    // Error details as fields, never a stack.
    expect(lines[0]!.fields).toMatchObject({
      event: 'store_unreachable',
      error: { code: 'SLUICE_ERR_STORE_UNAVAILABLE', message: 'the connection to Redis closed' },
    });
    expect(lines[2]!.fields).toMatchObject({ event: 'store_unreachable_ended', fallbackDecisions: 12 });
    expect(JSON.stringify(lines)).not.toContain('    at ');
    await m.close();
    expect(clock.pendingTimers).toBe(0);
  });

  it('rejects a consecutiveFailures out of range with a stable code', () => {
    expect(() => new FailoverMachine({ clock: new ManualClock(), probe: async () => {}, consecutiveFailures: 0 })).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field: 'failover.consecutiveFailures' }),
    );
  });
});

describe('describePolicies', () => {
  it('names the default policy, and the resources that differ, a few per policy', () => {
    expect(describePolicies('local', [])).toBe("the 'local' policy");
    expect(describePolicies('local', [['a', 'local']])).toBe("the 'local' policy");
    const many = ['e', 'd', 'c', 'b', 'a'].map((n) => [n, 'open'] as const);
    expect(describePolicies('local', [['pay', 'closed'], ...many, ['x', 'local']])).toBe(
      "the 'local' policy ('open' for a, b, c and 2 more; 'closed' for pay)",
    );
  });
});

describe('fallback decisions', () => {
  it('denies a local call before the switch and while the number of clients is unknown', () => {
    expect(answeringPolicy('local', true, true)).toBe('closed');
    expect(answeringPolicy('local', false, false)).toBe('closed');
    expect(answeringPolicy('local', false, true)).toBe('local');
    expect(answeringPolicy('open', true, false)).toBe('open');
    expect(answeringPolicy('closed', false, true)).toBe('closed');
  });

  it('shapes a decision: source fallback, the local permit prefix once, store_unavailable on a denial for want of the store', () => {
    const limits = [compileLimit({ algorithm: 'concurrency', limit: 4 })];
    const denied = fallbackDecision(combineStatuses(policyStatuses(limits, false, 500)), true);
    expect(denied).toMatchObject({ allowed: false, reason: 'store_unavailable', source: 'fallback', retryAfterMs: 500 });
    const share = fallbackDecision(combineStatuses(policyStatuses(limits, false, 10)), false);
    expect(share.reason).toBe('concurrency_limited');
    const open = fallbackDecision(combineStatuses(policyStatuses(limits, true, 10), 'abc'), true);
    expect(open).toMatchObject({ allowed: true, reason: 'allowed', remaining: 4, retryAfterMs: 0, permitId: 'local:abc' });
    expect(fallbackDecision(open, true).permitId).toBe('local:abc');
    expect(isLocalPermit('local:x')).toBe(true);
    expect(isLocalPermit('x')).toBe(false);
    expect(localPermitId('')).toBe('');
  });

  it('keeps at least one permit of a fair share', () => {
    expect(fairShare(100, 4)).toBe(25);
    expect(fairShare(3, 4)).toBe(1);
    expect(fairShare(7, 1)).toBe(7);
    // A policy without a burst keeps none; one with a burst gets its share of it too.
    expect(fairShareOf({ algorithm: 'gcra', limit: 100 }, 4)).toEqual({ algorithm: 'gcra', limit: 25 });
    expect(fairShareOf({ limit: 100, burst: 10 }, 4)).toEqual({ limit: 25, burst: 2 });
    const one = { limit: 9, burst: 3 };
    expect(fairShareOf(one, 1)).toBe(one);
  });
});
