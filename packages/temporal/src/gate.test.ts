import { afterEach, describe, expect, it, vi } from 'vitest';
import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure, CancelledFailure, defaultPayloadConverter } from '@temporalio/common';
import { ErrorCodes, SluiceError } from '@sluice/core';
import { SluiceActivityGate } from './gate.js';
import { SluiceActivityInboundInterceptor, wrapActivity } from './interceptor.js';
import { PRIORITY_HEADER, TENANT_HEADER } from './headers.js';
import type { SluiceActivityOptions } from './options.js';
import type { SluiceTemporalObserver } from './observer.js';
import { BookingLimiter, ScriptedLimiter, allow, booked, deny } from '../test/scripted-limiter.js';

const NOW = 1_000_000;
const silent = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

function setup<L extends ScriptedLimiter = ScriptedLimiter>(
  options: Partial<SluiceActivityOptions> = {},
  info: Record<string, unknown> = {},
  limiter: L = new ScriptedLimiter() as L,
) {
  const events: string[] = [];
  const observer: SluiceTemporalObserver = {
    waited: (e) => events.push(`waited:${e.resource}:${e.outcome}`),
    denied: (e) => events.push(`denied:${e.resource}:${e.reason}`),
    retryScheduled: (e) => events.push(`retry:${e.resource}:${e.delayMs}`),
    permitHeld: (e) => events.push(`held:${e.resource}:${e.delta}`),
    fault: (e) => events.push(`fault:${e.resource}:${e.kind}`),
    booked: (e) => events.push(`booked:${e.resource}:${e.outcome}`),
  };
  const gate = new SluiceActivityGate({
    limiter,
    observer,
    now: () => NOW,
    random: () => 0.5,
    activities: { call: { resource: 'api:a' } },
    ...options,
  });
  const env = new MockActivityEnvironment(
    { activityType: 'call', startToCloseTimeoutMs: 10_000, scheduleToCloseTimeoutMs: 0, scheduledTimestampMs: NOW, ...info },
    { logger: silent },
  );
  const heartbeats: unknown[] = [];
  env.on('heartbeat', (d: unknown) => heartbeats.push(d));
  const interceptor = new SluiceActivityInboundInterceptor(gate, env.context);
  const run = (next: () => Promise<unknown> = async () => 'done', headers = {}) =>
    interceptor.execute({ args: ['x'], headers }, async () => next());
  return { limiter, gate, env, events, heartbeats, run };
}

async function failureOf(p: Promise<unknown>): Promise<ApplicationFailure> {
  try {
    await p;
  } catch (err) {
    if (err instanceof ApplicationFailure) return err;
    throw err;
  }
  throw new Error('expected an ApplicationFailure');
}

afterEach(() => {
  vi.useRealTimers();
});

describe('non-blocking mode with bookings', () => {
  const info = { attempt: 1, activityId: 'act-1', workflowExecution: { workflowId: 'wf', runId: 'run' } };

  it('books a denied attempt and schedules the retry its lead before the slot, without jitter', async () => {
    const { limiter, run, events } = setup({ mode: 'non-blocking' }, info, new BookingLimiter());
    limiter.answers.push(booked(5000));
    const f = await failureOf(run());
    // The lead is 1000 ms until the worker has seen how late its retries arrive.
    expect(f.nextRetryDelay).toBe(4000);
    expect(limiter.methods()).toEqual(['book:api:a']);
    expect(events).toEqual(['booked:api:a:booked', 'denied:api:a:rate_limited', 'retry:api:a:4000']);
  });

  it('names one booking for every attempt of an activity, and another for another activity', async () => {
    const a = setup({ mode: 'non-blocking' }, info, new BookingLimiter());
    const b = setup({ mode: 'non-blocking' }, { ...info, attempt: 2 }, new BookingLimiter());
    const c = setup({ mode: 'non-blocking' }, { ...info, activityId: 'act-2' }, new BookingLimiter());
    for (const x of [a, b, c]) await x.run();
    const ids = [a, b, c].map((x) => (x.limiter.calls[0]!.options as { id: string }).id);
    expect(ids[0]).toMatch(/^t:[A-Za-z0-9_-]{43}$/);
    expect(ids[1]).toBe(ids[0]);
    expect(ids[2]).not.toBe(ids[0]);
    // Every attempt shows the same token (so a retry on another worker claims the booking), not the id.
    const tokens = [a, b, c].map((x) => (x.limiter.calls[0]!.options as { token: string }).token);
    expect(tokens[0]).toMatch(/^k:[A-Za-z0-9_-]{43}$/);
    expect(tokens[1]).toBe(tokens[0]);
    expect(tokens[2]).not.toBe(tokens[0]);
  });

  it('retries as without bookings when the service refuses more bookings for this client', async () => {
    const { limiter, run } = setup({ mode: 'non-blocking' }, info, new BookingLimiter());
    limiter.answers.push(new SluiceError('SLUICE_ERR_BOOKING_LIMIT' as never, 'this client holds its most bookings'), deny(2000));
    expect((await failureOf(run())).nextRetryDelay).toBe(2200);
    expect(limiter.methods()).toEqual(['book:api:a', 'try:api:a']);
  });

  it('waits inside the attempt for a slot within maxSlotWaitMs, then claims it and runs', async () => {
    vi.useFakeTimers();
    const { limiter, run, heartbeats } = setup({ mode: 'non-blocking', maxSlotWaitMs: 500 }, info, new BookingLimiter());
    limiter.answers.push(booked(300), allow({ booking: { outcome: 'claimed', id: 'b', startsInMs: 0, expiresInMs: 100 } }));
    const done = run();
    await vi.advanceTimersByTimeAsync(300);
    expect(await done).toBe('done');
    expect(limiter.methods()).toEqual(['book:api:a', 'book:api:a']);
    expect(heartbeats).toHaveLength(1);
  });

  it('uses a fixed retryLeadMs when given, and never schedules sooner than the minimum', async () => {
    const { gate } = setup({ mode: 'non-blocking', retryLeadMs: 300, minRetryDelayMs: 100 }, info, new BookingLimiter());
    expect(gate.bookedRetryDelay(booked(5000))).toBe(4700);
    expect(gate.bookedRetryDelay(booked(350))).toBe(100);
  });

  it('retries as without bookings when nothing could be booked, or when booking is off', async () => {
    const plain = setup({ mode: 'non-blocking' }, info, new BookingLimiter());
    plain.limiter.answers.push(deny(2000, { booking: { outcome: 'denied', id: 'b', startsInMs: 0, expiresInMs: 0 } }));
    expect((await failureOf(plain.run())).nextRetryDelay).toBe(2200);
    const off = setup({ mode: 'non-blocking', booking: false }, info, new BookingLimiter());
    off.limiter.answers.push(deny(2000));
    expect((await failureOf(off.run())).nextRetryDelay).toBe(2200);
    expect(off.limiter.methods()).toEqual(['try:api:a']);
  });

  it('cancels the booking when the activity is cancelled while waiting for its slot', async () => {
    const { limiter, run, env } = setup({ mode: 'non-blocking', maxSlotWaitMs: 5000 }, info, new BookingLimiter());
    limiter.answers.push(booked(3000));
    const done = run();
    await new Promise((r) => setImmediate(r));
    env.cancel();
    await expect(done).rejects.toBeInstanceOf(CancelledFailure);
    expect(limiter.methods()).toEqual(['book:api:a', 'cancel:api:a']);
  });
});

describe('non-blocking mode', () => {
  it('fails a denial with a retryable, benign SluiceRateLimited carrying the retry-after plus jitter', async () => {
    const { limiter, run, events } = setup({ mode: 'non-blocking' });
    limiter.answers.push(deny(2000));
    const f = await failureOf(run());
    expect(f.type).toBe('SluiceRateLimited');
    expect(f.nonRetryable).toBe(false);
    expect(f.category).toBe('BENIGN');
    // random() = 0.5, jitter 0.2: 2000 + 200.
    expect(f.nextRetryDelay).toBe(2200);
    expect(f.details?.[0]).toMatchObject({
      resource: 'api:a',
      reason: 'rate_limited',
      retryAfterMs: 2000,
      nextRetryDelayMs: 2200,
    });
    expect(limiter.methods()).toEqual(['try:api:a']);
    expect(events).toEqual(['denied:api:a:rate_limited', 'retry:api:a:2200']);
  });

  it('never schedules a retry sooner than the minimum delay', async () => {
    const { gate } = setup({ minRetryDelayMs: 250, retryJitter: 0 });
    expect(gate.retryDelay(deny(0, { reason: 'store_unavailable' }))).toBe(250);
    expect(gate.retryDelay(deny(1234.2))).toBe(1235);
  });

  it('runs the activity when admitted and passes nothing but the mapped resource', async () => {
    const { limiter, run } = setup({ mode: 'non-blocking' });
    expect(await run()).toBe('done');
    expect(limiter.calls).toEqual([{ method: 'try', resource: 'api:a', options: { cost: 1 } }]);
  });

  it('leaves unmapped activity types alone', async () => {
    const { limiter, run } = setup({ activities: { other: { resource: 'api:a' } } });
    expect(await run()).toBe('done');
    expect(limiter.calls).toHaveLength(0);
  });
});

describe('blocking mode', () => {
  it('waits at most the remaining start-to-close budget less the margin', async () => {
    const { limiter, run } = setup({ budgetMarginMs: 1500 });
    await run();
    expect(limiter.calls[0]!.method).toBe('acquire');
    expect((limiter.calls[0]!.options as { maxWaitMs: number }).maxWaitMs).toBe(8500);
  });

  it('takes the schedule-to-close deadline when it is nearer, and its own bound when that is nearer still', async () => {
    const a = setup({}, { scheduleToCloseTimeoutMs: 4000, scheduledTimestampMs: NOW - 1000 });
    await a.run();
    expect((a.limiter.calls[0]!.options as { maxWaitMs: number }).maxWaitMs).toBe(2000);
    const b = setup({ activities: { call: { resource: 'api:a', maxWaitMs: 700 } } });
    await b.run();
    expect((b.limiter.calls[0]!.options as { maxWaitMs: number }).maxWaitMs).toBe(700);
  });

  it('asks without waiting when no budget is left, and fails retryably on a denial', async () => {
    const { limiter, run } = setup({ budgetMarginMs: 10_000 });
    limiter.answers.push(deny(3000));
    const f = await failureOf(run());
    expect(f.type).toBe('SluiceRateLimited');
    expect(limiter.methods()).toEqual(['try:api:a']);
  });

  it('fails retryably when the wait would outlast the budget', async () => {
    const { limiter, run, events } = setup();
    limiter.answers.push(deny(30_000, { reason: 'wait_timeout' }));
    const f = await failureOf(run());
    expect(f.type).toBe('SluiceRateLimited');
    expect(f.nextRetryDelay).toBe(33_000);
    expect(events).toEqual(['waited:api:a:timeout', 'denied:api:a:wait_timeout', 'retry:api:a:33000']);
  });

  it('heartbeats what it waits for while it waits, then says it is permitted', async () => {
    vi.useFakeTimers();
    const { limiter, run, heartbeats } = setup({ heartbeatIntervalMs: 100 });
    let grant: (d: ReturnType<typeof allow>) => void = () => {};
    limiter.answers.push(() => new Promise((resolve) => (grant = resolve)));
    const result = run();
    await vi.advanceTimersByTimeAsync(350);
    expect(heartbeats).toHaveLength(3);
    expect(heartbeats[0]).toEqual({
      sluice: { state: 'waiting_for_permit', activityType: 'call', resource: 'api:a', waitedMs: 0, maxWaitMs: 9000 },
    });
    grant(allow());
    expect(await result).toBe('done');
    expect(heartbeats.at(-1)).toMatchObject({ sluice: { state: 'permitted', resource: 'api:a', source: 'store' } });
    await vi.advanceTimersByTimeAsync(1000);
    expect(heartbeats).toHaveLength(4);
  });

  it('passes the activity cancellation signal and turns an aborted wait into a CancelledFailure', async () => {
    const { limiter, run, env, events } = setup();
    limiter.answers.push(
      (options) =>
        new Promise((_, reject) =>
          options.signal!.addEventListener('abort', () => reject(new SluiceError(ErrorCodes.ABORTED, 'the wait was aborted'))),
        ),
    );
    const result = run();
    await Promise.resolve();
    env.cancel();
    await expect(result).rejects.toBeInstanceOf(CancelledFailure);
    expect(events).toEqual(['waited:api:a:cancelled']);
  });
});

describe('concurrency permits', () => {
  it('are released after success, after failure, and renewed while the activity runs', async () => {
    vi.useFakeTimers();
    const { limiter, run, events } = setup({ renewIntervalMs: 1000 });
    limiter.answers.push(allow({ permitId: 'L1' }));
    let finish: () => void = () => {};
    const result = run(() => new Promise<void>((r) => (finish = r)));
    await vi.advanceTimersByTimeAsync(2500);
    expect(limiter.methods()).toEqual(['acquire:api:a', 'renew:api:a', 'renew:api:a']);
    finish();
    await result;
    expect(limiter.methods().at(-1)).toBe('release:api:a');
    expect(limiter.calls.at(-1)!.options).toEqual({ permitId: 'L1' });
    await vi.advanceTimersByTimeAsync(5000);
    expect(limiter.methods().filter((m) => m.startsWith('renew'))).toHaveLength(2);

    limiter.answers.push(allow({ permitId: 'L2' }));
    await expect(run(() => Promise.reject(new Error('downstream failed')))).rejects.toThrow('downstream failed');
    expect(limiter.calls.at(-1)).toEqual({ method: 'release', resource: 'api:a', options: { permitId: 'L2' } });
    expect(events.filter((e) => e.startsWith('held'))).toEqual([
      'held:api:a:1',
      'held:api:a:-1',
      'held:api:a:1',
      'held:api:a:-1',
    ]);
  });

  it('are released when the activity is cancelled while running', async () => {
    const { limiter, run, env } = setup();
    limiter.answers.push(allow({ permitId: 'L3' }));
    const result = run(() => env.context.cancelled);
    await new Promise((r) => setImmediate(r));
    env.cancel();
    await expect(result).rejects.toBeInstanceOf(CancelledFailure);
    expect(limiter.methods().at(-1)).toBe('release:api:a');
  });
});

describe('several resources', () => {
  it('are all-or-nothing: a later denial gives back what earlier ones granted', async () => {
    const { limiter, run } = setup({
      mode: 'non-blocking',
      activities: { call: [{ resource: 'api:a', cost: 3, key: 'k' }, { resource: 'api:b' }] },
    });
    limiter.answers.push(allow(), deny(500));
    const f = await failureOf(run());
    expect(f.details?.[0]).toMatchObject({ resource: 'api:b' });
    expect(limiter.calls.at(-1)).toEqual({ method: 'adjust', resource: 'api:a', options: { key: 'k', delta: -3 } });
  });
});

describe('several resources for a tenant', () => {
  it('give the tenant its permits back too when a later resource denies', async () => {
    const { limiter, run } = setup({
      mode: 'non-blocking',
      activities: { call: [{ resource: 'api:a', tenant: () => 'acme' }, { resource: 'api:b' }] },
    });
    limiter.answers.push(allow(), deny(500));
    await expect(run()).rejects.toMatchObject({ type: 'SluiceRateLimited' });
    expect(limiter.calls.at(-1)).toEqual({
      method: 'adjust',
      resource: 'api:a',
      options: { delta: -1, tenant: 'acme' },
    });
  });
});

describe('several resources with a concurrency permit', () => {
  it('release the earlier lease when a later resource denies', async () => {
    const { limiter, run, events } = setup({
      mode: 'non-blocking',
      activities: { call: [{ resource: 'api:a' }, { resource: 'api:b' }] },
    });
    limiter.answers.push(allow({ permitId: 'L9' }), deny(500));
    await expect(run()).rejects.toMatchObject({ type: 'SluiceRateLimited' });
    expect(limiter.methods().slice(-2)).toEqual(['release:api:a', 'adjust:api:a']);
    expect(events.filter((e) => e.startsWith('held'))).toEqual(['held:api:a:1', 'held:api:a:-1']);
  });
});

describe('priority and tenant', () => {
  it('come from the headers, and a mapping may override them', async () => {
    const headers = {
      [PRIORITY_HEADER]: defaultPayloadConverter.toPayload('core'),
      [TENANT_HEADER]: defaultPayloadConverter.toPayload('acme'),
    };
    const a = setup({ mode: 'non-blocking' });
    await a.run(undefined, headers);
    expect(a.limiter.calls[0]!.options).toEqual({ cost: 1, priority: 'core', tenant: 'acme' });
    const b = setup({
      mode: 'non-blocking',
      activities: { call: { resource: 'api:a', tenant: (args) => `t-${String(args[0])}` } },
    });
    await b.run(undefined, headers);
    expect(b.limiter.calls[0]!.options).toMatchObject({ priority: 'core', tenant: 't-x' });
  });
});

describe('limiter faults', () => {
  it('closed: fail the attempt with a retryable SluiceLimiterFault, heartbeat it and count it', async () => {
    const { limiter, run, events, heartbeats } = setup({ mode: 'non-blocking', faultRetryDelayMs: 750 });
    limiter.answers.push(new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'connection refused'));
    const f = await failureOf(run());
    expect(f.type).toBe('SluiceLimiterFault');
    expect(f.nonRetryable).toBe(false);
    expect(f.nextRetryDelay).toBe(750);
    expect(events).toEqual(['fault:api:a:error']);
    expect(heartbeats[0]).toMatchObject({ sluice: { state: 'limiter_fault', resource: 'api:a', error: 'connection refused' } });
  });

  it('open: run without a permit', async () => {
    const { limiter, run } = setup({ mode: 'non-blocking', activities: { call: { resource: 'api:a', onLimiterFault: 'open' } } });
    limiter.answers.push(new Error('network down'));
    expect(await run()).toBe('done');
  });

  it('a malformed request fails for good (retrying cannot fix it)', async () => {
    const { limiter, run } = setup({ mode: 'non-blocking' });
    limiter.answers.push(new SluiceError(ErrorCodes.INVALID_KEY, 'key: too long'));
    const f = await failureOf(run());
    expect(f.type).toBe('SluiceInvalidRequest');
    expect(f.nonRetryable).toBe(true);
  });

  it('a tier the resource does not declare fails for good', async () => {
    const { limiter, run } = setup({ mode: 'non-blocking', activities: { call: { resource: 'api:a', priority: 'gold' } } });
    limiter.answers.push(new SluiceError(ErrorCodes.UNKNOWN_TIER, 'priority: resource "api:a" has no tier "gold"'));
    const f = await failureOf(run());
    expect(f.type).toBe('SluiceInvalidRequest');
    expect(f.nonRetryable).toBe(true);
    expect(limiter.calls[0]!.options).toMatchObject({ priority: 'gold' });
  });

  it('a decision made by the store-failure policy is counted and heartbeated', async () => {
    const { limiter, run, events, heartbeats } = setup({ mode: 'non-blocking' });
    limiter.answers.push(allow({ source: 'fallback' }));
    expect(await run()).toBe('done');
    expect(events).toEqual(['fault:api:a:fallback']);
    expect(heartbeats[0]).toMatchObject({ sluice: { state: 'permitted', source: 'fallback' } });
  });
});

describe('wrapActivity', () => {
  it('gates a single activity function', async () => {
    const { limiter, gate, env } = setup({ mode: 'non-blocking', activities: {} });
    const charge = wrapActivity(gate, { resource: 'api:b', cost: 2 }, async function charge(amount: number) {
      return amount * 2;
    });
    expect(await env.run(charge, 21)).toBe(42);
    limiter.answers.push(deny(100));
    await expect(env.run(charge, 1)).rejects.toMatchObject({ type: 'SluiceRateLimited' });
    expect(limiter.calls.map((c) => c.options)).toEqual([{ cost: 2 }, { cost: 2 }]);
  });

  it('validates its mapping when wrapping', () => {
    const { gate } = setup();
    expect(() => wrapActivity(gate, { resource: 'api:nope' }, async () => 1)).toThrow(/unknown|no limits/);
    // The same bound on resources per activity as the configuration's mapping.
    expect(() => wrapActivity(gate, [], async () => 1)).toThrow(/from 1 to 8 resources/);
  });
});
