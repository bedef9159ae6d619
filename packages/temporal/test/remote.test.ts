/**
 * The activity interceptor with the remote client: permits decided by a spawned `sluice serve`
 * (built CLI) through `RemoteLimiter`, against the real Temporal server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RemoteLimiter } from '@sluice/client';
import type { Client } from '@temporalio/client';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { bundleWorkflows, connectClient, randomId, temporalAddress } from './helpers.js';
import { withWorker } from './worker-in-process.js';
import { rulesFile, spawnServe, type Serve } from '../../../test/sluice-serve.js';

const RULES = `resources:
  api:remote: { limits: { algorithm: token-bucket, limit: 4, windowMs: 60000, burst: 4 } }
  api:paced: { limits: { algorithm: token-bucket, limit: 2, windowMs: 1000, burst: 1 } }
`;

let bundle: WorkflowBundleWithSourceMap;
let client: Client;
let closeClient: () => Promise<void>;
let server: Serve;
let rules: { path: string; remove: () => void };

beforeAll(async () => {
  temporalAddress();
  rules = rulesFile(RULES);
  [bundle, server] = await Promise.all([bundleWorkflows(), spawnServe({ rules: rules.path })]);
  ({ client, close: closeClient } = await connectClient());
});

afterAll(async () => {
  await closeClient?.();
  await server?.stop();
  rules?.remove();
});

describe('with RemoteLimiter over sluice serve', () => {
  it('admits what the service allows and retries the rest later (non-blocking)', async () => {
    const limiter = new RemoteLimiter({ url: server.url, checkTimeoutMs: 1000 });
    try {
      expect(await limiter.ready()).toBe(true);
      await withWorker(
        bundle,
        { limiter, mode: 'non-blocking', activities: { callShared: { resource: 'api:remote' } } },
        async (taskQueue, calls) => {
          const handle = await client.workflow.start('fanOut', {
            taskQueue,
            workflowId: randomId('remote'),
            args: [{ activity: 'callShared', count: 6 }],
          });
          const deadline = Date.now() + 15_000;
          let pending = 0;
          while (Date.now() < deadline) {
            const d = await handle.describe();
            pending = (d.raw.pendingActivities ?? []).filter(
              (p) => p.lastFailure?.applicationFailureInfo?.type === 'SluiceRateLimited',
            ).length;
            if (calls.ran.length >= 4 && pending >= 2) break;
            await new Promise((r) => setTimeout(r, 100));
          }
          expect(calls.ran).toHaveLength(4);
          expect(pending).toBe(2);
          await handle.terminate();
        },
      );
    } finally {
      await limiter.close();
    }
  });

  it('waits on the service in blocking mode', async () => {
    const limiter = new RemoteLimiter({ url: server.url, checkTimeoutMs: 1000 });
    try {
      expect(await limiter.ready()).toBe(true);
      await withWorker(bundle, { limiter, activities: { callShared: { resource: 'api:paced' } } }, async (taskQueue, calls) => {
        const handle = await client.workflow.start('fanOut', {
          taskQueue,
          workflowId: randomId('paced'),
          args: [{ activity: 'callShared', count: 3 }],
        });
        await handle.result();
        expect(calls.ran).toHaveLength(3);
        expect(calls.ran.every((c) => c.attempt === 1)).toBe(true);
      });
    } finally {
      await limiter.close();
    }
  });
});
