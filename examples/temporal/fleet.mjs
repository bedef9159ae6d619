// The sample fleet: four worker processes on two task queues ("orders" charges cards,
// "billing" refunds them) share one payment provider limited to 20 calls a second. Prints the
// calls the provider saw per second, then what the workers' metrics say.
//
//   bash scripts/redis-servers.sh start && bash scripts/temporal-server.sh start
//   set -a; . .run/redis/env; . .run/redis/temporal.env; set +a
//   npm run build && node examples/temporal/fleet.mjs [--orders 200] [--refunds 100]
import { spawn } from 'node:child_process';
import { get } from 'node:http';
import { createInterface } from 'node:readline';
import { URL, fileURLToPath } from 'node:url';
import { Connection, Client } from '@temporalio/client';
import { bundleWorkflows } from './bundle.mjs';
import { BURST, LIMIT_PER_SECOND } from './resources.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const orders = arg('orders', 200);
const refunds = arg('refunds', 100);
const address = process.env.SLUICE_TEMPORAL_ADDRESS ?? '127.0.0.1:7233';
const here = (file) => fileURLToPath(new URL(file, import.meta.url));
const prefix = `sluice-example:${Date.now()}:`;

console.log(`bundling workflows; Temporal at ${address}, Redis at ${process.env.SLUICE_REDIS_URL ?? 'redis://127.0.0.1:6379'}`);
const bundlePath = await bundleWorkflows('fleet');

const calls = [];
const workers = ['orders', 'orders', 'billing', 'billing'].map((taskQueue) => {
  const child = spawn(process.execPath, [here('./worker.mjs'), taskQueue, bundlePath], {
    env: { ...process.env, SLUICE_EXAMPLE_PREFIX: prefix },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const w = { taskQueue, child, ready: undefined, metricsPort: 0 };
  w.ready = new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`worker exited with ${code}`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const e = JSON.parse(line);
      if (e.event === 'ready') {
        w.metricsPort = e.metricsPort;
        resolve();
      } else if (e.event === 'call') calls.push(e);
    });
  });
  return w;
});
await Promise.all(workers.map((w) => w.ready));
console.log(
  `4 workers up (pids ${workers.map((w) => w.child.pid).join(', ')}); starting ${orders} charges and ${refunds} refunds`,
);

const connection = await Connection.connect({ address });
const client = new Client({ connection });
const started = Date.now();
const handles = [];
for (let i = 0; i < 10; i++) {
  handles.push(
    await client.workflow.start('chargeOrders', {
      taskQueue: 'orders',
      workflowId: `charge-${started}-${i}`,
      args: [{ count: Math.ceil(orders / 10), parallel: 5 }],
    }),
    await client.workflow.start('refundOrders', {
      taskQueue: 'billing',
      workflowId: `refund-${started}-${i}`,
      args: [{ count: Math.ceil(refunds / 10), parallel: 5 }],
    }),
  );
}
await Promise.all(handles.map((h) => h.result()));

// Calls per wall-clock second, as the provider saw them.
const first = Math.min(...calls.map((c) => c.at));
const seconds = new Map();
for (const c of calls) {
  const s = Math.floor((c.at - first) / 1000);
  const row = seconds.get(s) ?? { charge: 0, refund: 0 };
  row[c.kind]++;
  seconds.set(s, row);
}
console.log(`\nsecond  charges  refunds  total   (limit ${LIMIT_PER_SECOND}/s, burst ${BURST})`);
for (const [s, row] of [...seconds].sort((a, b) => a[0] - b[0])) {
  const total = row.charge + row.refund;
  console.log(
    `${String(s).padStart(6)}  ${String(row.charge).padStart(7)}  ${String(row.refund).padStart(7)}  ${String(total).padStart(5)}  ${'#'.repeat(total)}`,
  );
}
const sorted = calls.map((c) => c.at).sort((a, b) => a - b);
let peak = 0;
for (let lo = 0, hi = 0; hi < sorted.length; hi++) {
  while (sorted[hi] - sorted[lo] >= 1000) lo++;
  peak = Math.max(peak, hi - lo + 1);
}
const span = (sorted.at(-1) - sorted[0]) / 1000;
console.log(
  `\n${calls.length} calls in ${span.toFixed(1)} s: mean ${((calls.length - BURST) / span).toFixed(1)}/s, peak ${peak} in any 1 s window`,
);
console.log(`(limit ${LIMIT_PER_SECOND}/s plus a burst of ${BURST}: at most ${LIMIT_PER_SECOND + BURST} in any second)`);

// What the workers' metrics say, summed over the fleet.
const scrape = (port) =>
  new Promise((resolve, reject) => {
    get({ host: '127.0.0.1', port, path: '/metrics' }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve(body));
    }).on('error', reject);
  });
const totals = new Map();
for (const w of workers) {
  for (const line of (await scrape(w.metricsPort)).split('\n')) {
    const m =
      /^(sluice_temporal_(?:permit_wait_seconds_(?:count|sum)|denials_total|retries_scheduled_total|limiter_faults_total)\{[^}]*\}) (\S+)$/.exec(
        line,
      );
    if (m) totals.set(m[1], (totals.get(m[1]) ?? 0) + Number(m[2]));
  }
}
console.log('\nmetrics (summed over the 4 workers):');
for (const [series, value] of [...totals].sort()) console.log(`  ${series} ${Number(value.toFixed(3))}`);

await connection.close();
await Promise.all(
  workers.map(
    (w) =>
      new Promise((resolve) => {
        w.child.removeAllListeners('exit');
        w.child.once('exit', resolve);
        w.child.kill('SIGTERM');
      }),
  ),
);
