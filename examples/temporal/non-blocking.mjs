// Non-blocking mode with and without bookings, side by side: four worker processes on two task
// queues, one quota of 10 calls a second through Redis, 40 activities in non-blocking mode. Run
// once with bookings off (every denied attempt retries after its retry-after plus jitter) and
// once with them on (a denied attempt books its slot and its retry claims it). Prints, for each,
// the rate the quota saw, the busiest second and the attempts the activities needed.
//
//   bash scripts/redis-servers.sh start && bash scripts/temporal-server.sh start
//   set -a; . .run/redis/env; . .run/redis/temporal.env; set +a
//   npm run build && node examples/temporal/non-blocking.mjs [--activities 40]
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { URL, fileURLToPath } from 'node:url';
import { Connection, Client } from '@temporalio/client';
import { bundleWorkflows } from './bundle.mjs';
import { QUOTA_BURST, QUOTA_PER_SECOND } from './resources.mjs';

const i = process.argv.indexOf('--activities');
const total = i > 0 ? Number(process.argv[i + 1]) : 40;
const address = process.env.SLUICE_TEMPORAL_ADDRESS ?? '127.0.0.1:7233';
const here = (file) => fileURLToPath(new URL(file, import.meta.url));

const bundlePath = await bundleWorkflows('nonblocking');
const connection = await Connection.connect({ address });
const client = new Client({ connection });

/** One run of the fleet; resolves to the calls the quota saw. */
async function run(booking) {
  const prefix = `sluice-example-nb:${Date.now()}:`;
  const queues = [`orders-${Date.now()}`, `billing-${Date.now()}`];
  const calls = [];
  const workers = [queues[0], queues[0], queues[1], queues[1]].map((taskQueue) => {
    const child = spawn(process.execPath, [here('./worker.mjs'), taskQueue, bundlePath], {
      env: {
        ...process.env,
        SLUICE_EXAMPLE_PREFIX: prefix,
        SLUICE_EXAMPLE_SCENARIO: 'non-blocking',
        SLUICE_EXAMPLE_BOOKING: booking ? 'on' : 'off',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const ready = new Promise((resolve, reject) => {
      child.once('exit', (c) => reject(new Error(`worker exited with ${c}`)));
      createInterface({ input: child.stdout }).on('line', (line) => {
        const e = JSON.parse(line);
        if (e.event === 'ready') resolve();
        else if (e.event === 'call') calls.push(e);
      });
    });
    return { child, ready };
  });
  await Promise.all(workers.map((w) => w.ready));
  const handles = await Promise.all(
    [0, 1, 2, 3].map((n) =>
      client.workflow.start('refundOrders', {
        taskQueue: queues[n % 2],
        workflowId: `nb-${booking ? 'on' : 'off'}-${Date.now()}-${n}`,
        args: [{ count: total / 4, parallel: total / 4 }],
      }),
    ),
  );
  await Promise.all(handles.map((h) => h.result()));
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
  return calls;
}

function summary(label, calls) {
  const times = calls.map((c) => c.at).sort((a, b) => a - b);
  let peak = 0;
  for (let lo = 0, hi = 0; hi < times.length; hi++) {
    while (times[hi] - times[lo] >= 1000) lo++;
    peak = Math.max(peak, hi - lo + 1);
  }
  const span = (times.at(-1) - times[0]) / 1000;
  const attempts = calls.map((c) => c.attempt);
  return {
    label,
    calls: calls.length,
    seconds: span.toFixed(1),
    rate: ((calls.length - QUOTA_BURST) / span).toFixed(1),
    peak,
    maxAttempts: Math.max(...attempts),
    attempts: attempts.reduce((a, b) => a + b, 0),
  };
}

console.log(`${total} activities, quota ${QUOTA_PER_SECOND}/s (burst ${QUOTA_BURST}), 4 workers on 2 task queues`);
const rows = [summary('bookings off', await run(false)), summary('bookings on', await run(true))];
console.log('\nmode           calls  seconds  rate/s  peak in 1 s  max attempts  attempts');
for (const r of rows) {
  console.log(
    `${r.label.padEnd(13)}  ${String(r.calls).padStart(5)}  ${r.seconds.padStart(7)}  ${r.rate.padStart(6)}  ${String(r.peak).padStart(11)}  ${String(r.maxAttempts).padStart(12)}  ${String(r.attempts).padStart(8)}`,
  );
}
console.log(`(at most ${QUOTA_PER_SECOND + QUOTA_BURST} in any second: the token bucket's bound)`);
await connection.close();
