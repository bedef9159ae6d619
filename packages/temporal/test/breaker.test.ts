/**
 * The gate's outcome reports against the real server: activities whose downstream fails open the
 * resource's fleet-wide breaker, later attempts are refused (SluiceRateLimited) without calling
 * the downstream, and once it recovers a probe closes the breaker again.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Limiter } from '@sluice/core';
import { ApplicationFailure } from '@temporalio/common';
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

/** The type of the ApplicationFailure an activity failed with (undefined: the workflow succeeded). */
function failureType(err: unknown): string | undefined {
  let e = err as { cause?: unknown; type?: unknown } | undefined;
  while (e !== undefined && e !== null) {
    if (e instanceof ApplicationFailure) return e.type ?? undefined;
    e = e.cause as typeof e;
  }
  return err === undefined ? undefined : 'other';
}

it('failing activities open the fleet breaker, refused attempts spare the downstream, a probe closes it', async () => {
  const limiter = new Limiter({
    resources: {
      'api:down': {
        limits: { algorithm: 'token-bucket', limit: 10_000, windowMs: 1000 },
        breaker: {
          scope: 'fleet',
          minimumCalls: 5,
          failureRateThreshold: 0.5,
          // Long enough that the next workflow, on a busy machine, still meets the breaker open.
          openDurationMs: 5000,
          halfOpenProbes: 1,
          syncMs: 50,
        },
      },
    },
  });
  let failing = true;
  let downstreamCalls = 0;
  const callDown = async (): Promise<string> => {
    downstreamCalls++;
    if (failing) throw ApplicationFailure.retryable('the downstream answered 503', 'Downstream');
    return 'ok';
  };
  try {
    await withWorker(
      bundle,
      { limiter, mode: 'non-blocking', reportOutcomes: true, activities: { callDown: { resource: 'api:down' } } },
      async (taskQueue) => {
        const once = async (): Promise<string | undefined> => {
          const handle = await client.workflow.start('fanOut', {
            taskQueue,
            workflowId: randomId('wf'),
            args: [{ activity: 'callDown', count: 1, options: { retry: { maximumAttempts: 1 } } }],
          });
          return handle.result().then(
            () => undefined,
            (err: unknown) => failureType(err),
          );
        };
        // Failing: the first attempts reach the downstream and fail; then the breaker refuses.
        const seen: (string | undefined)[] = [];
        for (let i = 0; i < 40 && seen.at(-1) !== 'SluiceRateLimited'; i++) seen.push(await once());
        expect(seen.at(-1)).toBe('SluiceRateLimited');
        expect(seen.filter((t) => t === 'Downstream').length).toBeGreaterThanOrEqual(5);
        const reached = downstreamCalls;
        expect(reached).toBe(seen.filter((t) => t === 'Downstream').length);
        expect(await once()).toBe('SluiceRateLimited');
        expect(downstreamCalls).toBe(reached);
        // Recovered: after the open duration (5 s) one probe goes through, succeeds, and closes it.
        failing = false;
        let result: string | undefined = 'SluiceRateLimited';
        const deadline = Date.now() + 60_000;
        while (result !== undefined && Date.now() < deadline) {
          result = await once();
          if (result === 'SluiceRateLimited') await new Promise((r) => setTimeout(r, 50));
        }
        expect(result).toBeUndefined();
        expect(limiter.fleetBreakerOf('api:down')?.state).not.toBe('open');
      },
      { callDown },
    );
  } finally {
    await limiter.close();
  }
}, 120_000);
