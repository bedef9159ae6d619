import type { HotKey, HotKeyReport } from '@sluice/core';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue, type Registry } from 'prom-client';
import type { ResourceStats, TierStats } from '../metrics.js';
import type { HealthView } from '../stats/health.js';

/** A metric as `Registry.getMetricsAsJSON()` gives it. */
export type MetricJson = MetricObjectWithValues<MetricValue<string>>;

/**
 * How a gauge of several workers becomes one figure where a sum would mislead (every other metric
 * is summed, as prom-client does; its default process metrics carry their own). Counters and
 * histograms are summed.
 */
export const WORKER_AGGREGATORS: Readonly<Record<string, 'sum' | 'first' | 'min' | 'max' | 'average' | 'omit'>> = {
  sluice_build_info: 'first',
  // Workers follow the same store: a worker still behind shows as the lower figure elsewhere.
  sluice_rules_version: 'max',
  sluice_rollout_ratio: 'max',
  sluice_adaptive_limit: 'max',
  // The least left on a resource's deciding limit, as any worker saw it last.
  sluice_remaining_permits: 'min',
  // One machine, one clock: the workers measure the same skew.
  sluice_clock_skew_seconds: 'average',
  sluice_clock_skew_uncertainty_seconds: 'max',
  sluice_hot_keys_mitigated: 'sum',
  // Healthy only while every worker reaches the store.
  sluice_store_healthy: 'min',
};

/** A worker's metrics as it sends them: with the aggregation each gauge needs across workers. */
export function forAggregation(metrics: readonly MetricJson[]): MetricJson[] {
  return metrics.map((m) => {
    const aggregator = WORKER_AGGREGATORS[m.name];
    return aggregator === undefined ? m : { ...m, aggregator };
  });
}

/** One registry of every worker's (and the primary's) metrics, merged by prom-client's AggregatorRegistry. */
export function mergeMetrics(all: readonly (readonly MetricJson[])[]): Registry {
  return AggregatorRegistry.aggregate(all.map((m) => [...m]));
}

/** The `/v1/stats` body, as far as the workers' bodies are merged. */
export interface StatsBody {
  readonly at: number;
  readonly version: number;
  readonly resources: readonly ResourceStats[];
  readonly health: HealthView;
  readonly hotKeys: readonly (HotKeyReport & { readonly keysHidden?: true })[];
  readonly [other: string]: unknown;
}

/**
 * One `/v1/stats` body of every worker's: decisions, fallback decisions and hot-key calls are
 * summed, the latest `remaining` is the least any worker saw, the p99 the largest, the store
 * reachable only when every worker reaches it. What every worker shares (the clock skew, the
 * adaptive limits, the live-client count) comes from `own`, the answering worker's body.
 */
export function mergeStats(own: StatsBody, others: readonly StatsBody[]): StatsBody {
  const all = [own, ...others];
  return {
    ...own,
    version: Math.max(...all.map((b) => b.version)),
    resources: mergeResources(all.map((b) => b.resources)),
    health: mergeHealth(
      own.health,
      all.map((b) => b.health),
    ),
    hotKeys: mergeHotKeys(all.map((b) => b.hotKeys)),
  };
}

function mergeResources(lists: readonly (readonly ResourceStats[])[]): ResourceStats[] {
  const by = new Map<string, ResourceStats>();
  for (const list of lists) {
    for (const r of list) {
      const was = by.get(r.resource);
      by.set(r.resource, was === undefined ? r : addResource(was, r));
    }
  }
  return [...by.values()];
}

function addResource(a: ResourceStats, b: ResourceStats): ResourceStats {
  const boosted = a.boosted === undefined && b.boosted === undefined ? undefined : (a.boosted ?? 0) + (b.boosted ?? 0);
  const tiers = a.tiers === undefined && b.tiers === undefined ? undefined : addTiers(a.tiers ?? [], b.tiers ?? []);
  return {
    resource: a.resource,
    allowed: a.allowed + b.allowed,
    denied: a.denied + b.denied,
    shadowDenied: a.shadowDenied + b.shadowDenied,
    limit: Math.max(a.limit, b.limit),
    remaining: Math.min(a.remaining, b.remaining),
    ...(boosted === undefined ? {} : { boosted }),
    ...(tiers === undefined ? {} : { tiers }),
  };
}

function addTiers(a: readonly TierStats[], b: readonly TierStats[]): TierStats[] {
  const by = new Map<string, TierStats>(a.map((t) => [t.tier, t]));
  for (const t of b) {
    const was = by.get(t.tier);
    by.set(
      t.tier,
      was === undefined
        ? t
        : {
            tier: t.tier,
            allowed: was.allowed + t.allowed,
            denied: was.denied + t.denied,
            boosted: was.boosted + t.boosted,
            shadowDenied: was.shadowDenied + t.shadowDenied,
          },
    );
  }
  return [...by.values()];
}

function mergeHealth(own: HealthView, all: readonly HealthView[]): HealthView {
  const away = all.filter((h) => !h.reachable);
  const p99s = all.map((h) => h.decisionP99Seconds).filter((p): p is number => p !== undefined);
  const { unreachableForMs: _u, reason: _r, decisionP99Seconds: _p, ...rest } = own;
  const first = away[0];
  return {
    ...rest,
    reachable: away.length === 0,
    fallbackDecisions: all.reduce((n, h) => n + h.fallbackDecisions, 0),
    ...(first === undefined
      ? {}
      : {
          unreachableForMs: Math.max(...away.map((h) => h.unreachableForMs ?? 0)),
          ...(first.reason === undefined ? {} : { reason: first.reason }),
        }),
    ...(p99s.length === 0 ? {} : { decisionP99Seconds: Math.max(...p99s) }),
  };
}

function mergeHotKeys(lists: readonly StatsBody['hotKeys'][]): StatsBody['hotKeys'] {
  const by = new Map<string, { report: StatsBody['hotKeys'][number]; keys: Map<string, HotKey>; report_: number }>();
  for (const list of lists) {
    for (const r of list) {
      const was = by.get(r.resource);
      if (was === undefined) {
        by.set(r.resource, { report: r, keys: new Map(r.keys.map((k) => [k.key, k])), report_: r.keys.length });
        continue;
      }
      was.report = { ...was.report, calls: was.report.calls + r.calls, mitigated: was.report.mitigated + r.mitigated };
      was.report_ = Math.max(was.report_, r.keys.length);
      for (const k of r.keys) {
        const k0 = was.keys.get(k.key);
        was.keys.set(
          k.key,
          k0 === undefined
            ? k
            : {
                ...k0,
                calls: k0.calls + k.calls,
                error: k0.error + k.error,
                rate: k0.rate + k.rate,
                mitigation: k0.mitigation ?? k.mitigation,
              },
        );
      }
    }
  }
  return [...by.values()].map(({ report, keys, report_ }) => {
    const heaviest = [...keys.values()].sort((x, y) => y.calls - x.calls).slice(0, report_);
    // A key's share is of the resource's calls over every worker.
    return { ...report, keys: heaviest.map((k) => ({ ...k, share: report.calls > 0 ? k.calls / report.calls : 0 })) };
  });
}
