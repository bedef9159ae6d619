// One worker process of the sample fleet: polls one task queue, gates its activities with a
// limiter shared by the whole fleet through Redis, and serves its metrics on a loopback port.
//
//   node examples/temporal/worker.mjs <task-queue> <bundle-path>
import { createServer } from 'node:http';
import { NativeConnection, Worker, Runtime, DefaultLogger } from '@temporalio/worker';
import { Registry } from 'prom-client';
import { Limiter } from '@sluice/core';
import { RedisStore } from '@sluice/redis';
import { createSluiceInterceptors } from '@sluice/temporal';
import { createTemporalMetrics } from '@sluice/temporal/metrics';
import { Context } from '@temporalio/activity';
import { quotaResources, resources as paymentResources } from './resources.mjs';

const [taskQueue, bundlePath] = process.argv.slice(2);
const address = process.env.SLUICE_TEMPORAL_ADDRESS ?? '127.0.0.1:7233';
const redisUrl = process.env.SLUICE_REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = process.env.SLUICE_EXAMPLE_PREFIX ?? 'sluice-example:';
// SLUICE_EXAMPLE_SCENARIO=non-blocking (non-blocking.mjs): every refund in non-blocking mode on
// one quota, with bookings unless SLUICE_EXAMPLE_BOOKING=off.
const nonBlocking = process.env.SLUICE_EXAMPLE_SCENARIO === 'non-blocking';
const resources = nonBlocking ? quotaResources : paymentResources;
Runtime.install({ logger: new DefaultLogger('WARN') });

const registry = new Registry();
// A generous timeout: four workers and the server share a small machine in this sample.
const store = new RedisStore({ url: redisUrl, prefix, commandTimeoutMs: 1000 });
// Should Redis be away, each of the fleet's processes decides locally on its fair share.
const limiter = new Limiter({ store, resources, failover: { peers: Number(process.env.SLUICE_EXAMPLE_WORKERS ?? 4) } });

// The downstream: a payment provider that must never see more than 20 calls a second in total.
async function callProvider(kind, id) {
  const at = Date.now();
  const { attempt } = Context.current().info;
  process.stdout.write(`${JSON.stringify({ event: 'call', kind, id, at, attempt, taskQueue, pid: process.pid })}\n`);
  await new Promise((r) => setTimeout(r, 20));
  return at;
}

const connection = await NativeConnection.connect({ address });
const worker = await Worker.create({
  connection,
  taskQueue,
  workflowBundle: { codePath: bundlePath },
  activities: {
    chargeCard: (id) => callProvider('charge', id),
    refundCard: (id) => callProvider('refund', id),
  },
  maxConcurrentActivityTaskExecutions: 20,
  interceptors: createSluiceInterceptors({
    limiter,
    observer: createTemporalMetrics({ registry }),
    // Keyed by the downstream, not by the task queue: both activity types share one limit.
    activities: nonBlocking
      ? { refundCard: { resource: 'api:quota', mode: 'non-blocking' } }
      : {
          chargeCard: { resource: 'api:payment_provider', mode: 'blocking' },
          refundCard: { resource: 'api:payment_provider', mode: 'non-blocking' },
        },
    booking: process.env.SLUICE_EXAMPLE_BOOKING !== 'off',
  }),
});

const metrics = createServer((req, res) => {
  void registry.metrics().then((text) => {
    res.writeHead(200, { 'content-type': registry.contentType });
    res.end(text);
  });
});
metrics.listen(0, '127.0.0.1', () => {
  process.stdout.write(
    `${JSON.stringify({ event: 'ready', pid: process.pid, taskQueue, metricsPort: metrics.address().port })}\n`,
  );
});

const stop = () => worker.shutdown();
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
try {
  await worker.run();
} finally {
  metrics.close();
  await connection.close();
  await limiter.close();
  await store.close();
}
