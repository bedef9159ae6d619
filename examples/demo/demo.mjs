// A live demo of Sluice on its embedded in-memory store: simulated callers share one limit per
// downstream resource, and every second the demo prints what was admitted and rejected.
//
//   npm run demo                 # 10 seconds
//   npm run demo -- --seconds 0  # until Ctrl-C
import { Limiter } from '@sluice/core';

const argSeconds = process.argv.indexOf('--seconds');
const seconds = argSeconds > 0 ? Number(process.argv[argSeconds + 1]) : 10;

const resources = {
  // A paid API with a quota: 50 calls/s, bursts of 10.
  'api:payment_gateway': { algorithm: 'token-bucket', limit: 50, burst: 10 },
  // A database: 200 queries/s and never more than 5 at once.
  'db:user_center': [
    { algorithm: 'gcra', limit: 200, burst: 20 },
    { algorithm: 'concurrency', limit: 5, permitTtlMs: 5000 },
  ],
};
const limiter = new Limiter({ resources });

const stats = new Map(Object.keys(resources).map((r) => [r, { admitted: 0, rejected: 0, waited: 0 }]));
let running = true;

/** A caller that tries without waiting, `rate` times a second (a gateway-like caller). */
async function eager(resource, rate) {
  while (running) {
    const d = await limiter.try(resource);
    const s = stats.get(resource);
    if (d.allowed) s.admitted++;
    else s.rejected++;
    await sleep(1000 / rate);
  }
}

/** A caller that waits up to 200 ms for a permit and holds a connection for ~20 ms (a worker). */
async function patient(resource) {
  while (running) {
    const d = await limiter.acquire(resource, { maxWaitMs: 200 });
    const s = stats.get(resource);
    if (!d.allowed) {
      s.rejected++;
      continue;
    }
    s.admitted++;
    if (d.waitedMs) s.waited++;
    await sleep(15 + Math.random() * 10);
    if (d.permitId) await limiter.release(resource, { permitId: d.permitId });
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

const callers = [
  // Six gateway callers at 20/s each: 120/s of demand against a 50/s quota.
  ...Array.from({ length: 6 }, () => eager('api:payment_gateway', 20)),
  // Twelve workers sharing a database that allows 5 concurrent queries.
  ...Array.from({ length: 12 }, () => patient('db:user_center')),
];

console.log('Sluice demo on the embedded store: 6 callers share api:payment_gateway (50/s),');
console.log('12 workers share db:user_center (200/s, 5 at once). Ctrl-C to stop.\n');
console.log('second  resource              admitted/s  rejected/s  waited');
let second = 0;
const ticker = setInterval(() => {
  second++;
  for (const [resource, s] of stats) {
    console.log(
      `${String(second).padStart(6)}  ${resource.padEnd(22)}${String(s.admitted).padStart(10)}${String(s.rejected).padStart(12)}${String(s.waited).padStart(8)}`,
    );
    s.admitted = s.rejected = s.waited = 0;
  }
  if (seconds > 0 && second >= seconds) void stop();
}, 1000);

async function stop() {
  if (!running) return;
  running = false;
  clearInterval(ticker);
  await Promise.allSettled(callers);
  await limiter.close();
}

process.on('SIGINT', () => void stop());
