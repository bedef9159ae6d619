import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import type { OutcomeReport } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { SluiceActivityGate } from './gate.js';
import { SluiceActivityInboundInterceptor } from './interceptor.js';
import { ScriptedLimiter } from '../test/scripted-limiter.js';

const silent = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

class ReportingLimiter extends ScriptedLimiter {
  readonly reports: OutcomeReport[] = [];
  reportOutcome(report: OutcomeReport): void {
    this.reports.push(report);
  }
}

function setup(reportOutcomes: boolean) {
  const limiter = new ReportingLimiter();
  let now = 1_000_000;
  const gate = new SluiceActivityGate({
    limiter,
    reportOutcomes,
    now: () => now,
    activities: { call: [{ resource: 'api:a', key: (args) => String(args[0]) }, { resource: 'api:b' }] },
  });
  const env = new MockActivityEnvironment(
    { activityType: 'call', startToCloseTimeoutMs: 10_000, scheduleToCloseTimeoutMs: 0, scheduledTimestampMs: now },
    { logger: silent },
  );
  const interceptor = new SluiceActivityInboundInterceptor(gate, env.context);
  const run = (next: () => Promise<unknown>) =>
    interceptor.execute({ args: ['tenant-1'], headers: {} }, async () => {
      now += 40;
      return next();
    });
  return { limiter, run };
}

describe('activity outcomes', () => {
  it('reports each attempt per resource: success, failure, and what is not the downstream', async () => {
    const { limiter, run } = setup(true);
    await run(async () => 'ok');
    await expect(run(() => Promise.reject(ApplicationFailure.retryable('503 from upstream')))).rejects.toThrow();
    await expect(run(() => Promise.reject(ApplicationFailure.nonRetryable('bad input')))).rejects.toThrow();
    await expect(run(() => Promise.reject(new CancelledFailure('cancelled')))).rejects.toThrow();
    expect(limiter.reports).toEqual([
      { resource: 'api:a', key: 'tenant-1', ok: true, durationMs: 40 },
      { resource: 'api:b', ok: true, durationMs: 40 },
      { resource: 'api:a', key: 'tenant-1', ok: false, durationMs: 40 },
      { resource: 'api:b', ok: false, durationMs: 40 },
      { resource: 'api:a', key: 'tenant-1', ok: true, durationMs: 40 },
      { resource: 'api:b', ok: true, durationMs: 40 },
    ]);
  });

  it('reports nothing unless asked, and refuses to report through a limiter that cannot', async () => {
    const { limiter, run } = setup(false);
    await run(async () => 'ok');
    expect(limiter.reports).toEqual([]);
    expect(() => new SluiceActivityGate({ limiter: new ScriptedLimiter(), reportOutcomes: true })).toThrow(/reportOutcome/);
  });
});
