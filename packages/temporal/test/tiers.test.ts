/**
 * Tiers from workflow code: a workflow names its tier (`withSluiceContext({ priority: 'vip' })`),
 * the tier travels to the limiter in the activity headers, and vip calls denied by the limit are
 * admitted from the resource's boost pool while standard calls are shed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Limiter } from '@sluice/core';
import type { Client } from '@temporalio/client';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
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

describe('priority tiers through Temporal', () => {
  it('admits a vip workflow past the limit from the boost pool, while standard is shed', async () => {
    // 4 permits an hour, half kept for vip: standard gets 2; vip the other 2 and 2 from the pool.
    const hour = 3_600_000;
    const limiter = new Limiter({
      resources: {
        'api:tiers': {
          limits: { algorithm: 'token-bucket', limit: 4, windowMs: hour },
          priority: { tiers: [{ name: 'vip', share: 0.5 }, { name: 'standard' }], default: 'standard' },
          boost: { limit: 2, windowMs: hour, algorithm: 'token-bucket', tiers: ['vip'] },
        },
      },
    });
    try {
      await withWorker(
        bundle,
        { limiter, mode: 'non-blocking', activities: { callShared: { resource: 'api:tiers' } } },
        async (taskQueue, calls) => {
          const standard = await client.workflow.start('fanOut', {
            taskQueue,
            workflowId: randomId('standard'),
            args: [{ activity: 'callShared', count: 4 }],
          });
          const deadline = Date.now() + 20_000;
          while (calls.ran.filter((c) => c.workflowId === standard.workflowId).length < 2 && Date.now() < deadline) {
            await new Promise((r) => setTimeout(r, 50));
          }
          const vip = await client.workflow.start('fanOut', {
            taskQueue,
            workflowId: randomId('vip'),
            args: [{ activity: 'callShared', count: 4, context: { priority: 'vip' } }],
          });
          await vip.result();
          const first = (id: string) => calls.ran.filter((c) => c.workflowId === id && c.attempt === 1).length;
          expect(first(standard.workflowId)).toBe(2);
          expect(first(vip.workflowId)).toBe(4);
          // The pool is used up: a further vip call is denied.
          expect((await limiter.try('api:tiers', { priority: 'vip' })).allowed).toBe(false);
          await standard.terminate();
        },
      );
    } finally {
      await limiter.close();
    }
  });
});
