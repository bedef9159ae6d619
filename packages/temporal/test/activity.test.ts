/**
 * The activity interceptor against the real server: blocking waits heartbeat (visible in
 * `describe`) and stay inside the timeout budget; non-blocking denials carry their retry delay
 * into the history; cancellation ends a wait; limiter faults follow their policy and show.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { Limiter, type ResourceConfig } from '@sluice/core';
import type { Client, WorkflowHandle } from '@temporalio/client';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { createTemporalMetrics } from '../src/metrics.js';
import { bundleWorkflows, connectClient, decodePayloads, randomId } from './helpers.js';
import { withWorker } from './worker-in-process.js';

let bundle: WorkflowBundleWithSourceMap;
let client: Client;
let closeClient: () => Promise<void>;

beforeAll(async () => {
  bundle = await bundleWorkflows();
  ({ client, close: closeClient } = await connectClient());
});
afterAll(async () => {
  await closeClient?.();
});

function limiterWith(resources: Record<string, ResourceConfig>): Limiter {
  return new Limiter({ resources });
}

async function fanOut(taskQueue: string, args: object): Promise<WorkflowHandle> {
  return client.workflow.start('fanOut', { taskQueue, workflowId: randomId('wf'), args: [args] });
}

/** Polls `describe` until a pending activity's heartbeat says it waits for a permit. */
async function waitingDetails(handle: WorkflowHandle): Promise<Record<string, unknown> | undefined> {
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    const d = await handle.describe();
    for (const p of d.raw.pendingActivities ?? []) {
      const [details] = decodePayloads(p.heartbeatDetails?.payloads) as { sluice?: Record<string, unknown> }[];
      if (details?.sluice?.state === 'waiting_for_permit') return details.sluice;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return undefined;
}

/** Sum of a metric's samples (a histogram's `_count` when `sample` is 'count') matching `labels`. */
async function metric(registry: Registry, name: string, labels: Record<string, string>, sample = ''): Promise<number> {
  const m = (await registry.getMetricsAsJSON()).find((x) => x.name === name);
  const values = (m?.values ?? []) as { value: number; labels: Record<string, string>; metricName?: string }[];
  const wanted = sample === '' ? name : `${name}_${sample}`;
  return values
    .filter((v) => (v.metricName ?? name) === wanted)
    .filter((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val))
    .reduce((sum, v) => sum + v.value, 0);
}

describe('blocking mode', () => {
  it('heartbeats while waiting (describe shows what for) and never times out', async () => {
    const limiter = limiterWith({ 'api:slow': { algorithm: 'token-bucket', limit: 1, windowMs: 3000, burst: 1 } });
    const registry = new Registry();
    try {
      await withWorker(
        bundle,
        {
          limiter,
          activities: { callShared: { resource: 'api:slow' } },
          observer: createTemporalMetrics({ registry }),
          heartbeatIntervalMs: 200,
        },
        async (taskQueue, calls) => {
          // Two calls, one permit per 3 s: the second waits past its 1 s heartbeat timeout.
          const handle = await fanOut(taskQueue, { activity: 'callShared', count: 2, options: { heartbeatTimeout: '1s' } });
          const details = await waitingDetails(handle);
          expect(details).toMatchObject({ state: 'waiting_for_permit', resource: 'api:slow', activityType: 'callShared' });
          expect(details!.maxWaitMs).toBeGreaterThan(0);
          expect(details!.waitedMs).toBeGreaterThanOrEqual(0);
          await handle.result();
          expect(calls.ran).toHaveLength(2);
          expect(calls.ran.every((c) => c.attempt === 1)).toBe(true);
          const events = (await handle.fetchHistory()).events ?? [];
          expect(events.filter((e) => e.activityTaskTimedOutEventAttributes || e.activityTaskFailedEventAttributes)).toHaveLength(
            0,
          );
          // Both calls went through the blocking path; the second waited for the bucket to refill.
          const waits = { outcome: 'granted', resource: 'api:slow' };
          expect(await metric(registry, 'sluice_temporal_permit_wait_seconds', waits, 'count')).toBe(2);
          expect(await metric(registry, 'sluice_temporal_permit_wait_seconds', waits, 'sum')).toBeGreaterThan(1);
        },
      );
    } finally {
      await limiter.close();
    }
  });

  it('never waits past the start-to-close budget: it fails retryably and is retried after the retry-after', async () => {
    const limiter = limiterWith({ 'api:slow': { algorithm: 'token-bucket', limit: 1, windowMs: 4000, burst: 1 } });
    try {
      await withWorker(
        bundle,
        { limiter, activities: { callShared: { resource: 'api:slow' } }, budgetMarginMs: 500 },
        async (taskQueue, calls) => {
          // 2 s start-to-close less the margin leaves 1.5 s: the second call's 4 s wait cannot fit.
          const handle = await fanOut(taskQueue, {
            activity: 'callShared',
            count: 2,
            options: { startToCloseTimeout: '2s', heartbeatTimeout: '1s' },
          });
          await handle.result();
          expect(calls.ran).toHaveLength(2);
          const events = (await handle.fetchHistory()).events ?? [];
          expect(events.filter((e) => e.activityTaskTimedOutEventAttributes)).toHaveLength(0);
          const retried = events.map((e) => e.activityTaskStartedEventAttributes).filter((a) => (a?.attempt ?? 0) > 1);
          expect(retried).toHaveLength(1);
          expect(retried[0]!.lastFailure?.applicationFailureInfo?.type).toBe('SluiceRateLimited');
        },
      );
    } finally {
      await limiter.close();
    }
  });

  it('ends a wait when the activity is cancelled', async () => {
    // The second call's wait (20 s) fits its budget (30 s start-to-close): it really waits.
    const limiter = limiterWith({ 'api:slow': { algorithm: 'token-bucket', limit: 1, windowMs: 20_000, burst: 1 } });
    const registry = new Registry();
    try {
      await withWorker(
        bundle,
        {
          limiter,
          activities: { callShared: { resource: 'api:slow' } },
          observer: createTemporalMetrics({ registry }),
          heartbeatIntervalMs: 100,
        },
        async (taskQueue) => {
          const handle = await fanOut(taskQueue, { activity: 'callShared', count: 2, options: { heartbeatTimeout: '1s' } });
          expect(await waitingDetails(handle)).toBeDefined();
          await handle.cancel();
          const deadline = Date.now() + 15_000;
          while (
            Date.now() < deadline &&
            (await metric(registry, 'sluice_temporal_permit_wait_seconds', { outcome: 'cancelled' }, 'count')) === 0
          ) {
            await new Promise((r) => setTimeout(r, 100));
          }
          expect(await metric(registry, 'sluice_temporal_permit_wait_seconds', { outcome: 'cancelled' }, 'count')).toBe(1);
        },
      );
    } finally {
      await limiter.close();
    }
  });
});

describe('non-blocking mode', () => {
  it('fails a denial with SluiceRateLimited whose nextRetryDelay is in the history', async () => {
    const limiter = limiterWith({ 'api:slow': { algorithm: 'token-bucket', limit: 1, windowMs: 2000, burst: 1 } });
    const registry = new Registry();
    try {
      await withWorker(
        bundle,
        {
          limiter,
          mode: 'non-blocking',
          // A plain denial: with bookings, a slot 2 s away is waited for inside the attempt.
          booking: false,
          activities: { callShared: { resource: 'api:slow' } },
          observer: createTemporalMetrics({ registry }),
        },
        async (taskQueue, calls) => {
          const handle = await fanOut(taskQueue, { activity: 'callShared', count: 2 });
          await handle.result();
          const events = (await handle.fetchHistory()).events ?? [];
          const retried = events.map((e) => e.activityTaskStartedEventAttributes).filter((a) => (a?.attempt ?? 0) > 1);
          expect(retried.length).toBeGreaterThanOrEqual(1);
          const failure = retried[0]!.lastFailure!;
          const info = failure.applicationFailureInfo!;
          expect(info.type).toBe('SluiceRateLimited');
          expect(info.nonRetryable).toBeFalsy();
          expect(String(info.category)).toMatch(/BENIGN|^1$/);
          const delayMs = Number(info.nextRetryDelay?.seconds ?? 0) * 1000 + Math.round((info.nextRetryDelay?.nanos ?? 0) / 1e6);
          const [details] = decodePayloads(info.details?.payloads) as { retryAfterMs: number; nextRetryDelayMs: number }[];
          // The delay is the decision's retry-after (up to 2 s) plus at most 20% jitter.
          expect(details!.nextRetryDelayMs).toBe(delayMs);
          expect(delayMs).toBeGreaterThanOrEqual(details!.retryAfterMs);
          expect(delayMs).toBeLessThanOrEqual(Math.ceil(details!.retryAfterMs * 1.2) + 1);
          expect(delayMs).toBeGreaterThan(500);
          expect(calls.ran.filter((c) => c.attempt === 1)).toHaveLength(1);
          expect(
            await metric(registry, 'sluice_temporal_retries_scheduled_total', { activity_type: 'callShared' }),
          ).toBeGreaterThanOrEqual(1);
          expect(await metric(registry, 'sluice_temporal_denials_total', { reason: 'rate_limited' })).toBeGreaterThanOrEqual(1);
        },
      );
    } finally {
      await limiter.close();
    }
  });
});

describe('limiter faults', () => {
  it('closed: a limiter that throws fails the attempt with SluiceLimiterFault, shown in heartbeat and metrics', async () => {
    const limiter = limiterWith({ 'api:x': { algorithm: 'token-bucket', limit: 100 } });
    const registry = new Registry();
    const options = { limiter, activities: { callShared: { resource: 'api:x' } }, observer: createTemporalMetrics({ registry }) };
    await limiter.close(); // every call now throws SLUICE_ERR_CLOSED
    await withWorker(bundle, options, async (taskQueue, calls) => {
      const handle = await fanOut(taskQueue, { activity: 'callShared', count: 1 });
      const deadline = Date.now() + 15_000;
      let pending;
      while (Date.now() < deadline) {
        pending = (await handle.describe()).raw.pendingActivities?.[0];
        if (pending?.lastFailure) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(pending?.lastFailure?.applicationFailureInfo?.type).toBe('SluiceLimiterFault');
      const [details] = decodePayloads(pending?.heartbeatDetails?.payloads) as { sluice: Record<string, unknown> }[];
      expect(details?.sluice).toMatchObject({ state: 'limiter_fault', resource: 'api:x' });
      expect(await metric(registry, 'sluice_temporal_limiter_faults_total', { kind: 'error' })).toBeGreaterThanOrEqual(1);
      expect(calls.ran).toHaveLength(0);
      await handle.terminate();
    });
  });

  it('open: a limiter that throws lets the activity run without a permit', async () => {
    const limiter = limiterWith({ 'api:x': { algorithm: 'token-bucket', limit: 100 } });
    await limiter.close();
    await withWorker(
      bundle,
      { limiter, activities: { callShared: { resource: 'api:x', onLimiterFault: 'open' } } },
      async (taskQueue, calls) => {
        await (await fanOut(taskQueue, { activity: 'callShared', count: 2 })).result();
        expect(calls.ran).toHaveLength(2);
      },
    );
  });

  it("a store outage follows the resource's store-failure policy and is counted", async () => {
    const { RedisStore } = await import('@sluice/redis');
    // Nothing listens on port 1: every store call fails at once.
    const store = new RedisStore({ url: 'redis://127.0.0.1:1', commandTimeoutMs: 50, connectTimeoutMs: 50 });
    const limiter = new Limiter({
      store,
      // One worker, said explicitly: a store unreachable from the start never reports a peer
      // count, and the default share denies until it knows one.
      failover: { peers: 1 },
      resources: {
        'api:local': { limits: { algorithm: 'token-bucket', limit: 100 }, onStoreFailure: 'local' },
        'api:closed': { limits: { algorithm: 'token-bucket', limit: 100 }, onStoreFailure: 'closed' },
      },
    });
    const registry = new Registry();
    try {
      await withWorker(
        bundle,
        {
          limiter,
          activities: { callShared: { resource: 'api:local' }, callOther: { resource: 'api:closed' } },
          observer: createTemporalMetrics({ registry }),
        },
        async (taskQueue, calls) => {
          await (await fanOut(taskQueue, { activity: 'callShared', count: 2 })).result();
          expect(calls.ran.filter((c) => c.type === 'callShared')).toHaveLength(2);
          expect(
            await metric(registry, 'sluice_temporal_limiter_faults_total', { kind: 'fallback', resource: 'api:local' }),
          ).toBe(2);
          const closed = await fanOut(taskQueue, { activity: 'callOther', count: 1 });
          const deadline = Date.now() + 15_000;
          let pending;
          while (Date.now() < deadline) {
            pending = (await closed.describe()).raw.pendingActivities?.[0];
            if (pending?.lastFailure) break;
            await new Promise((r) => setTimeout(r, 100));
          }
          const [details] = decodePayloads(pending?.lastFailure?.applicationFailureInfo?.details?.payloads) as {
            reason: string;
          }[];
          expect(pending?.lastFailure?.applicationFailureInfo?.type).toBe('SluiceRateLimited');
          expect(details?.reason).toBe('store_unavailable');
          const [hb] = decodePayloads(pending?.heartbeatDetails?.payloads) as { sluice: Record<string, unknown> }[];
          expect(hb?.sluice).toMatchObject({ state: 'limiter_fault', source: 'fallback', resource: 'api:closed' });
          expect(calls.ran.filter((c) => c.type === 'callOther')).toHaveLength(0);
          await closed.terminate();
        },
      );
    } finally {
      await limiter.close();
      await store.close();
    }
  });
});
