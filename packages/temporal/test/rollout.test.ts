/**
 * A rule rollout seen from Temporal activities: the interceptor's permits come from a spawned
 * `sluice serve` through `RemoteLimiter`, and the service decides them by the candidate's
 * limits for the keys of the candidate cohort (here every key: the rollout is at 100 %).
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { RemoteLimiter } from '@sluice/client';
import type { Client } from '@temporalio/client';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { bundleWorkflows, connectClient, randomId, temporalAddress } from './helpers.js';
import { withWorker } from './worker-in-process.js';
import { TOKEN, rulesFile, spawnSluice, type Serve } from '../../../test/sluice-serve.js';

const RULES = (limit: number) => `resources:
  api:remote: { limits: { algorithm: token-bucket, limit: ${limit}, windowMs: 3600000, burst: ${limit} } }
`;

let bundle: WorkflowBundleWithSourceMap;
let client: Client;
let closeClient: () => Promise<void>;
let server: Serve;
let rules: { path: string; remove: () => void };

beforeAll(async () => {
  temporalAddress();
  rules = rulesFile(RULES(4));
  [bundle, server] = await Promise.all([
    bundleWorkflows(),
    spawnSluice(['--rules', rules.path, '--port', '0', '--grpc-port', '0', '--rollout-poll-ms', '100'], {
      SLUICE_SHUTDOWN_GRACE_MS: '500',
    }),
  ]);
  ({ client, close: closeClient } = await connectClient());
});

afterAll(async () => {
  await closeClient?.();
  await server?.stop();
  rules?.remove();
});

async function admin(path: string, body?: unknown): Promise<{ status: number; json: { rollout: { status: string } } }> {
  const res = await fetch(new URL(`/v1/admin${path}`, server.url), {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, json: (await res.json()) as { rollout: { status: string } } };
}

describe('a rule rollout under the Temporal activity interceptor', () => {
  it('admits activities by the candidate limit while the rollout runs', { timeout: 120_000 }, async () => {
    const started = await admin('/rollout', {
      text: RULES(1),
      author: 'ana',
      reason: 'one call an hour',
      steps: [{ percent: 100, holdMs: 3_600_000 }],
      // Six calls: too few for the judge to act on.
      thresholds: { minCalls: 1000 },
    });
    expect(started.status).toBe(201);
    // A generous bound on each check: a busy machine's slow answer is not the subject here.
    const limiter = new RemoteLimiter({ url: server.url, checkTimeoutMs: 10_000 });
    try {
      expect(await limiter.ready()).toBe(true);
      // The server applies the rollout at its next poll (every 100 ms).
      await vi.waitFor(
        async () => {
          const r = (await (await fetch(new URL('/v1/rollout', server.url))).json()) as { rollout: { percent: number } | null };
          expect(r.rollout?.percent).toBe(100);
        },
        { timeout: 30_000, interval: 100 },
      );
      await withWorker(
        bundle,
        { limiter, mode: 'non-blocking', activities: { callShared: { resource: 'api:remote' } } },
        async (taskQueue, calls) => {
          const handle = await client.workflow.start('fanOut', {
            taskQueue,
            workflowId: randomId('rollout'),
            args: [{ activity: 'callShared', count: 6 }],
          });
          // The candidate allows 1 where the version in force allows 4: one runs, five are refused.
          await vi.waitFor(
            async () => {
              const d = await handle.describe();
              const pending = (d.raw.pendingActivities ?? []).filter(
                (p) => p.lastFailure?.applicationFailureInfo?.type === 'SluiceRateLimited',
              ).length;
              expect({ ran: calls.ran.length, pending }).toEqual({ ran: 1, pending: 5 });
            },
            { timeout: 60_000, interval: 100 },
          );
          expect(calls.ran).toHaveLength(1);
          await handle.terminate();
        },
      );
    } finally {
      await limiter.close();
    }
    expect((await admin('/rollout/abort', { author: 'ana', reason: 'done' })).json.rollout.status).toBe('aborted');
  });
});
