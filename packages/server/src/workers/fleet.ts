import type { ServerMetrics } from '../metrics.js';
import type { WorkerLink } from './link.js';
import { forAggregation, mergeMetrics, mergeStats, type MetricJson, type StatsBody } from './merge.js';

/** `/metrics` and `/v1/stats` over every worker (what the HTTP app's `fleet` takes). */
export interface WorkerFigures {
  metrics(): Promise<{ readonly text: string; readonly contentType: string }>;
  stats(admin: boolean): Promise<StatsBody>;
}

/** A worker's own `/v1/stats` body, tagged with its slot. */
interface SlotStats {
  readonly slot: number;
  readonly body: StatsBody;
}

/**
 * A worker's `/metrics` and `/v1/stats` over every worker: it offers its own figures to the
 * primary's gathering and answers with every worker's, merged. Its own metrics carry
 * `sluice_worker_requests_total{worker}`: the HTTP requests and gRPC calls it answered.
 */
export function fleetOf(
  link: WorkerLink,
  metrics: ServerMetrics,
  ownStats: (admin: boolean) => Promise<StatsBody>,
): WorkerFigures {
  const worker = String(link.slot);
  link.provide('metrics', async () => {
    const own = await metrics.registry.getMetricsAsJSON();
    return [...forAggregation(own), requestsOf(own, worker)];
  });
  link.provide('stats', async (arg) => ({ slot: link.slot, body: await ownStats(arg === true) }) satisfies SlotStats);
  return {
    metrics: async () => {
      const merged = mergeMetrics((await link.gather('metrics')) as MetricJson[][]);
      return { text: await merged.metrics(), contentType: merged.contentType };
    },
    stats: async (admin) => {
      const own = await ownStats(admin);
      const others = ((await link.gather('stats', admin)) as SlotStats[]).filter((s) => s.slot !== link.slot).map((s) => s.body);
      return mergeStats(own, others);
    },
  };
}

/** `sluice_worker_requests_total` of one worker, from its request counters as they are now. */
function requestsOf(own: readonly MetricJson[], worker: string): MetricJson {
  const total = (name: string) => own.find((m) => m.name === name)?.values.reduce((n, v) => n + v.value, 0) ?? 0;
  return {
    name: 'sluice_worker_requests_total',
    help: 'HTTP requests and gRPC calls answered, by worker (sluice serve --workers) and transport',
    type: 'counter',
    aggregator: 'sum',
    values: [
      { labels: { worker, transport: 'http' }, value: total('sluice_http_requests_total') },
      { labels: { worker, transport: 'grpc' }, value: total('sluice_grpc_requests_total') },
    ],
  } as unknown as MetricJson;
}
