/**
 * Several worker processes on two task queues share one downstream limit through Redis; a
 * killed worker's concurrency permits come back after their permitTtlMs. Real Temporal, real Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Limiter, type ResourceConfig } from '@sluice/core';
import { RedisStore } from '@sluice/redis';
import type { Client } from '@temporalio/client';
import {
  bundleWorkflows,
  connectClient,
  maxInWindow,
  randomId,
  redisUrl,
  temporalAddress,
  writeBundle,
  WorkerProcess,
} from './helpers.js';

const RATE = 20;
const BURST = 5;
const POOL = 3;
const PERMIT_TTL_MS = 2000;

const resources: Record<string, ResourceConfig> = {
  'api:shared': { algorithm: 'token-bucket', limit: RATE, windowMs: 1000, burst: BURST },
  'pool:shared': { algorithm: 'concurrency', limit: POOL, permitTtlMs: PERMIT_TTL_MS },
};
const activities = { callShared: { resource: 'api:shared' }, hold: { resource: 'pool:shared' } };

describe('a fleet of worker processes sharing one downstream', () => {
  const prefix = `${randomId('fleet')}:`;
  const workers: WorkerProcess[] = [];
  let client: Client;
  let closeClient: () => Promise<void>;
  let removeBundle: (() => void) | undefined;
  let base: object;

  beforeAll(async () => {
    const address = temporalAddress();
    const url = redisUrl();
    const written = writeBundle(await bundleWorkflows());
    removeBundle = written.remove;
    base = { address, redisUrl: url, prefix, resources, activities, bundlePath: written.path };
    ({ client, close: closeClient } = await connectClient());
  });

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop()));
    await closeClient?.();
    removeBundle?.();
  });

  function startWorker(taskQueue: string): WorkerProcess {
    const w = new WorkerProcess({ ...base, taskQueue });
    workers.push(w);
    return w;
  }

  it('keeps the admitted rate of four processes on two task queues within the one limit', async () => {
    const queues = [randomId('orders'), randomId('billing')];
    const fleet = [startWorker(queues[0]!), startWorker(queues[0]!), startWorker(queues[1]!), startWorker(queues[1]!)];
    await Promise.all(fleet.map((w) => w.ready()));
    const perWorkflow = 20;
    const handles = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        client.workflow.start('fanOut', {
          taskQueue: queues[i % 2]!,
          workflowId: randomId('fan'),
          args: [{ activity: 'callShared', count: perWorkflow, parallel: 10 }],
        }),
      ),
    );
    await Promise.all(handles.map((h) => h.result()));
    const admitted = fleet.flatMap((w) => w.events.filter((e) => e.event === 'admitted'));
    expect(admitted).toHaveLength(8 * perWorkflow);
    // Every process took part: the limit spans processes and task queues.
    expect(new Set(admitted.map((e) => e.pid)).size).toBeGreaterThanOrEqual(3);
    const times = admitted.map((e) => e.at);
    // The peak on Redis' clock, where the bound is exact; the activities' clocks add the time a
    // busy process takes between the decision and the activity.
    const decided = fleet.flatMap((w) => w.events.filter((e) => e.event === 'decided')).map((e) => e.at);
    expect(decided).toHaveLength(8 * perWorkflow);
    const peak = maxInWindow(decided, 1000);
    const spanS = (Math.max(...times) - Math.min(...times)) / 1000;
    const mean = (admitted.length - BURST) / spanS;
    console.log(
      `fleet: ${admitted.length} admissions in ${spanS.toFixed(1)} s, mean ${mean.toFixed(1)}/s, peak ${peak} in 1 s (limit ${RATE}/s, burst ${BURST})`,
    );
    // Token bucket: at most burst + rate in any second by the store's clock. Limits per process
    // would let about four times the rate through.
    expect(peak).toBeLessThanOrEqual(RATE + BURST);
    expect(mean).toBeLessThanOrEqual(RATE * 1.15);
    // Blocking waits heartbeat and end in time: no attempt failed or timed out.
    for (const h of handles.slice(0, 2)) {
      const history = await h.fetchHistory();
      const failed = (history.events ?? []).filter(
        (e) => e.activityTaskFailedEventAttributes || e.activityTaskTimedOutEventAttributes,
      );
      expect(failed).toHaveLength(0);
    }
  });

  it("frees a killed worker's concurrency permits after their permitTtlMs", async () => {
    const queue = randomId('pool');
    const victim = startWorker(queue);
    await victim.ready();
    const handle = await client.workflow.start('fanOut', {
      taskQueue: queue,
      workflowId: randomId('hold'),
      args: [{ activity: 'hold', count: POOL, args: [60_000], options: { heartbeatTimeout: '2s', startToCloseTimeout: '90s' } }],
    });
    const deadline = Date.now() + 30_000;
    while (victim.events.filter((e) => e.event === 'holding').length < POOL && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(victim.events.filter((e) => e.event === 'holding')).toHaveLength(POOL);

    const store = new RedisStore({ url: redisUrl(), prefix, commandTimeoutMs: 1000 });
    const probe = new Limiter({ store, resources, concurrencyPollMs: 20 });
    try {
      await victim.kill();
      // The dead worker's permits are still held...
      const right = await probe.try('pool:shared');
      expect(right.allowed).toBe(false);
      expect(right.reason).toBe('concurrency_limited');
      // ...until their permits expire: nobody renews them any more.
      const freed = await probe.acquire('pool:shared', { maxWaitMs: PERMIT_TTL_MS * 5 });
      expect(freed.allowed).toBe(true);
      await probe.release('pool:shared', { permitId: freed.permitId! });
      // Another worker picks the retried activities up and gets the permits.
      const heir = startWorker(queue);
      await heir.ready();
      const results = (await handle.result()) as { pid: number }[];
      expect(results).toHaveLength(POOL);
      expect(results.every((r) => r.pid === heir.pid)).toBe(true);
      expect(heir.events.filter((e) => e.event === 'holding').length).toBeGreaterThanOrEqual(POOL);
    } finally {
      await probe.close();
      await store.close();
    }
  });
});
