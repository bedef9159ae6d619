/**
 * The workflow side against the real server: the workflow entry bundles without Node or Redis,
 * the permit helper waits deterministically (replayed from its own history), and priority and
 * tenant travel from workflow to limiter in headers (non-core shed first, tenants on own quotas).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { Limiter, type ResourceConfig } from '@sluice/core';
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { bundleWorkflows, connectClient, randomId } from './helpers.js';
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

const limiterWith = (resources: Record<string, ResourceConfig>) => new Limiter({ resources });

describe('the workflow entry point', () => {
  it('bundles with no Node built-ins, no Redis and no Sluice module but its own workflow files', () => {
    const modules = new Set(bundle.code.match(/packages\/[a-z]+\/(?:dist|src)\/[a-z-]+\.[jt]s/g) ?? []);
    expect([...modules].sort()).toEqual([
      'packages/temporal/dist/headers.js',
      'packages/temporal/dist/permit-protocol.js',
      'packages/temporal/dist/retry-delay.js',
      'packages/temporal/dist/workflow.js',
    ]);
    expect(bundle.code).not.toMatch(/ioredis|@sluice\/(core|redis|client)|node_modules\/prom-client/);
    expect(bundle.code).not.toMatch(/require\(["'](node:)?(crypto|net|fs|os|child_process)["']\)/);
  });
});

describe('acquirePermit (workflow helper)', () => {
  it('waits with durable sleeps until permitted, and replays deterministically from its history', async () => {
    const limiter = limiterWith({ 'api:helper': { algorithm: 'token-bucket', limit: 2, windowMs: 1000, burst: 1 } });
    try {
      await withWorker(bundle, { limiter }, async (taskQueue) => {
        const handle = await client.workflow.start('viaHelper', {
          taskQueue,
          workflowId: randomId('helper'),
          args: [{ resource: 'api:helper', count: 4, maxWaitMs: 30_000 }],
        });
        const grants = (await handle.result()) as { allowed: boolean; asks: number }[];
        expect(grants).toHaveLength(4);
        expect(grants.every((g) => g.allowed)).toBe(true);
        // 1 permit per 500 ms: later grants had to ask again after sleeping.
        expect(grants.some((g) => g.asks > 1)).toBe(true);
        const history = await handle.fetchHistory();
        const events = history.events ?? [];
        expect(events.filter((e) => e.timerStartedEventAttributes).length).toBeGreaterThan(0);
        expect(events.filter((e) => e.markerRecordedEventAttributes).length).toBeGreaterThan(4);
        await Worker.runReplayHistory({ workflowBundle: bundle }, history, handle.workflowId);
        // Re-records test/fixtures/helper-history.bin (replayed offline by replay.test.ts).
        if (process.env.SLUICE_RECORD_HISTORY) {
          writeFileSync(process.env.SLUICE_RECORD_HISTORY, temporal.api.history.v1.History.encode(history).finish());
        }
      });
    } finally {
      await limiter.close();
    }
  });

  it('gives up at maxWaitMs with a wait_timeout denial instead of waiting forever', async () => {
    const limiter = limiterWith({ 'api:helper': { algorithm: 'token-bucket', limit: 1, windowMs: 60_000, burst: 1 } });
    try {
      await withWorker(bundle, { limiter }, async (taskQueue) => {
        const handle = await client.workflow.start('viaHelper', {
          taskQueue,
          workflowId: randomId('helper'),
          args: [{ resource: 'api:helper', count: 2, maxWaitMs: 1000 }],
        });
        const grants = (await handle.result()) as { allowed: boolean; reason: string }[];
        expect(grants.map((g) => g.allowed)).toEqual([true, false]);
        expect(grants[1]!.reason).toBe('wait_timeout');
      });
    } finally {
      await limiter.close();
    }
  });
});

describe('priority and tenant travel in headers', () => {
  it('sheds normal traffic first: core calls use the share reserved for them', async () => {
    // 10 permits a minute, half reserved for core: normal calls get 5.
    const limiter = limiterWith({
      'api:prio': { limits: { algorithm: 'token-bucket', limit: 10, windowMs: 60_000, burst: 10 }, priority: { coreShare: 0.5 } },
    });
    try {
      await withWorker(
        bundle,
        { limiter, mode: 'non-blocking', activities: { callShared: { resource: 'api:prio' } } },
        async (taskQueue, calls) => {
          const normal = await client.workflow.start('fanOut', {
            taskQueue,
            workflowId: randomId('normal'),
            args: [{ activity: 'callShared', count: 8, context: { priority: 'normal', tenant: 'acme' } }],
          });
          const deadline = Date.now() + 20_000;
          while (calls.ran.filter((c) => c.workflowId === normal.workflowId).length < 5 && Date.now() < deadline) {
            await new Promise((r) => setTimeout(r, 50));
          }
          const core = await client.workflow.start('fanOut', {
            taskQueue,
            workflowId: randomId('core'),
            args: [{ activity: 'callShared', count: 5, context: { priority: 'core' } }],
          });
          await core.result();
          const first = (id: string) => calls.ran.filter((c) => c.workflowId === id && c.attempt === 1).length;
          expect(first(normal.workflowId)).toBe(5);
          expect(first(core.workflowId)).toBe(5);
          await normal.terminate();
        },
      );
    } finally {
      await limiter.close();
    }
  });

  it('draws each tenant on its own quota (tenant from the memo or withSluiceContext)', async () => {
    const limiter = limiterWith({
      'api:tenants': {
        limits: { algorithm: 'token-bucket', limit: 100, windowMs: 60_000 },
        tenants: { '*': { algorithm: 'token-bucket', limit: 3, windowMs: 60_000 } },
      },
    });
    try {
      await withWorker(
        bundle,
        { limiter, mode: 'non-blocking', activities: { callShared: { resource: 'api:tenants' } } },
        async (taskQueue, calls) => {
          const a = await client.workflow.start('fanOut', {
            taskQueue,
            workflowId: randomId('tenant-a'),
            args: [{ activity: 'callShared', count: 5, context: { tenant: 'a' } }],
          });
          const b = await client.workflow.start('fanOut', {
            taskQueue,
            workflowId: randomId('tenant-b'),
            memo: { sluice: { tenant: 'b' } },
            args: [{ activity: 'callShared', count: 3 }],
          });
          await b.result();
          const deadline = Date.now() + 10_000;
          while (calls.ran.filter((c) => c.workflowId === a.workflowId).length < 3 && Date.now() < deadline) {
            await new Promise((r) => setTimeout(r, 50));
          }
          const first = (id: string) => calls.ran.filter((c) => c.workflowId === id && c.attempt === 1).length;
          // Tenant a is capped at its 3; tenant b's 3 were not affected by a's excess.
          expect(first(a.workflowId)).toBe(3);
          expect(first(b.workflowId)).toBe(3);
          const described = await a.describe();
          const pending = described.raw.pendingActivities ?? [];
          expect(pending.length).toBeGreaterThan(0);
          expect(pending.some((p) => p.lastFailure?.applicationFailureInfo?.type === 'SluiceRateLimited')).toBe(true);
          await a.terminate();
        },
      );
    } finally {
      await limiter.close();
    }
  });
});
