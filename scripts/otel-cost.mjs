// What OpenTelemetry costs a decision: CPU time per `Limiter.try` with the observer `sluice serve`
// runs (Prometheus), OpenTelemetry off or on as the OTEL_* variables of this process ask (each
// call in a decision-batch span, as one HTTP check is). Run each mode in its own process, in turn
// (a context manager, once registered, costs every promise of the process). Needs `npm run build`.
//
// Usage: node scripts/otel-cost.mjs off|on memory|redis
//   redis: SLUICE_REDIS_URL (keys under a prefix of this run; they expire within a second)
//   on:    OTEL_EXPORTER_OTLP_ENDPOINT (a collector; OTEL_TRACES_EXPORTER=none for metrics alone,
//          OTEL_TRACES_SAMPLER=always_off for spans that record nothing)
// Prints one JSON line: the median of 5 rounds, and each round, in CPU µs per decision.
import { Limiter } from '@sluice/core';
import { createPrometheusObserver } from '@sluice/core/metrics';
import { RedisStore } from '@sluice/redis';
import { Registry } from 'prom-client';

const [mode, store] = process.argv.slice(2);
if (!['off', 'on'].includes(mode ?? '') || !['memory', 'redis'].includes(store ?? '')) {
  console.error('usage: node scripts/otel-cost.mjs off|on memory|redis');
  process.exit(2);
}
const registry = new Registry();
let observer = createPrometheusObserver({ registry });
let otel;
if (mode === 'on') {
  const { readOtelEnv, startOtel, joinObservers } = await import('@sluice/core/otel');
  const env = readOtelEnv(process.env, { serviceName: 'otel-cost' });
  if (env === undefined) {
    console.error('on: set OTEL_EXPORTER_OTLP_ENDPOINT (or an OTEL_*_EXPORTER)');
    process.exit(2);
  }
  otel = startOtel(env, { registry, store: { system: 'redis', address: 'redis:6379' } });
  observer = joinObservers(observer, otel.observer);
}
const prefix = `otel-cost:${process.pid}:`;
const redis =
  store === 'redis'
    ? new RedisStore({ url: process.env.SLUICE_REDIS_URL ?? 'redis://127.0.0.1:6379', prefix, commandTimeoutMs: 2000 })
    : undefined;
const limiter = new Limiter({
  resources: { api: { limits: { algorithm: 'token-bucket', limit: 1e9, windowMs: 1000 } } },
  ...(redis === undefined ? {} : { store: redis, closeStore: true }),
  observer,
});
const decide = (i) => limiter.try('api', { key: `k${i % 10_000}` });
const call = otel?.tracing === undefined ? decide : (i) => otel.tracing.batch({ operation: 'check', items: 1 }, () => decide(i));

/** CPU µs per decision over `n` decisions, 256 in flight. */
async function round(n) {
  let next = 0;
  const worker = async () => {
    while (next < n) await call(next++);
  };
  const before = process.cpuUsage();
  await Promise.all(Array.from({ length: 256 }, worker));
  const used = process.cpuUsage(before);
  return (used.user + used.system) / n;
}

await round(20_000);
const rounds = [];
for (let r = 0; r < 5; r++) rounds.push(await round(store === 'redis' ? 40_000 : 200_000));
const median = [...rounds].sort((a, b) => a - b)[2];
const fixed = (x) => Number(x.toFixed(2));
console.log(JSON.stringify({ mode, store, cpuUsPerDecision: fixed(median), rounds: rounds.map(fixed) }));
await limiter.close();
await otel?.close();
