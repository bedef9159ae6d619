import type { ClockSkewObserver, Decision, LimiterObserver } from '@sluice/core';
import {
  DURATION_BUCKETS,
  createClockSkewObserver,
  createPrometheusObserver,
  promMetrics,
  registerBuildInfo,
  SeriesHistogram,
  type HistogramSeries,
} from '@sluice/core/metrics';
import { OVERRIDE_RESOURCE_PREFIX } from '@sluice/rules';
import { Registry, collectDefaultMetrics, type Counter, type Gauge } from 'prom-client';
import type { ConnectionCut } from './clients/connections.js';

/** Live figures of one resource, for `GET /v1/stats` and `sluice status`. */
export interface ResourceStats {
  readonly resource: string;
  /** Decisions made since start. */
  readonly allowed: number;
  readonly denied: number;
  /** Admitted in shadow mode although the limit would have denied. */
  readonly shadowDenied: number;
  /** From the latest decision: the deciding limit and what was left of it. */
  readonly limit: number;
  readonly remaining: number;
  /** Admitted by the boost pool after the limits denied (present once there was one). */
  readonly boosted?: number;
  /** Decisions by tier, on resources that declare `priority.tiers` (present once there was one). */
  readonly tiers?: readonly TierStats[];
}

/** Decisions of one tier of a resource since start (see {@link ResourceStats.tiers}). */
export interface TierStats {
  readonly tier: string;
  readonly allowed: number;
  readonly denied: number;
  /** Of `allowed`, those the boost pool admitted. */
  readonly boosted: number;
  /** Of `allowed`, those admitted only because the resource is in shadow mode. */
  readonly shadowDenied: number;
}

interface Tally {
  allowed: number;
  denied: number;
  shadowDenied: number;
  limit: number;
  remaining: number;
  boosted?: number;
  tiers?: Map<string, { allowed: number; denied: number; boosted: number; shadowDenied: number }>;
}

/** The resource label of every Envoy limit override's decisions. */
export const OVERRIDES = 'envoy:/override';

/**
 * The server's Prometheus registry: the core's decision and store metrics plus requests by
 * transport (counted and timed), the active rule version, fallbacks and pre-filter rejections,
 * the build, and process metrics. Label values are bounded: resources come from the rules,
 * routes from the route table, methods from fixed sets, and every Envoy limit override (callers
 * choose those) is counted under the one resource {@link OVERRIDES}. docs/metrics.md lists them.
 */
export class ServerMetrics {
  readonly registry = new Registry();
  readonly observer: LimiterObserver;
  readonly #http: Counter<'route' | 'method' | 'status'>;
  readonly #grpc: Counter<'method' | 'code'>;
  readonly #httpDurations: SeriesHistogram<'route' | 'method'>;
  /** Series of {@link #httpDurations} by route, then method (both bounded: routes and HTTP methods). */
  readonly #httpSeries = new Map<string, Map<string, HistogramSeries>>();
  readonly #grpcDurations: SeriesHistogram<'method'>;
  readonly #grpcSeries = new Map<string, HistogramSeries>();
  readonly #version: Gauge;
  readonly #ruleChanges: Counter<'change'>;
  readonly #remaining: Gauge<'resource'>;
  readonly #fallbacks: Counter<'resource'>;
  readonly #prefilter: Counter<'resource'>;
  readonly #bookings: Counter<'resource' | 'outcome'>;
  readonly #overridesRefused: Counter;
  readonly #cuts: Counter<'listener' | 'reason'>;
  readonly #open: Gauge<'listener'>;
  readonly #warnings: Counter<'event'>;
  readonly #boosted: Counter<'resource' | 'tier'>;
  readonly #tierDecisions: Counter<'resource' | 'tier' | 'outcome'>;
  readonly #tallies = new Map<string, Tally>();
  readonly #adaptiveMoves: Counter<'resource' | 'direction'>;
  readonly #adaptiveLimit: Gauge<'resource'>;
  /** The clock-skew monitor's hooks: `sluice_clock_skew_seconds` and its companions. */
  readonly clockSkew: ClockSkewObserver;
  readonly #hotMitigated: Gauge<'resource' | 'action'>;
  readonly #hotMitigations: Counter<'resource' | 'action'>;
  /**
   * `sluice_decision_duration_seconds` (the core observer's), whose bucket counts every resource
   * and source together give the p99 of decision latency over a window (`LatencyWindow`).
   */
  readonly decisionDurations: SeriesHistogram;

  constructor() {
    const m = promMetrics({ registry: this.registry });
    collectDefaultMetrics({ register: this.registry });
    registerBuildInfo(this.registry, new URL('../package.json', import.meta.url));
    this.#http = m.counter({
      name: 'sluice_http_requests_total',
      help: 'HTTP requests by route, method and status',
      labelNames: ['route', 'method', 'status'] as const,
    });
    this.#grpc = m.counter({
      name: 'sluice_grpc_requests_total',
      help: 'gRPC calls by method and status code',
      labelNames: ['method', 'code'] as const,
    });
    this.#httpDurations = m.seriesHistogram({
      name: 'sluice_http_request_duration_seconds',
      help: 'Time from an HTTP request received to its answer sent, by route and method',
      labelNames: ['route', 'method'] as const,
      buckets: DURATION_BUCKETS,
    });
    this.#grpcDurations = m.seriesHistogram({
      name: 'sluice_grpc_request_duration_seconds',
      help: "Time from a gRPC call's stream opened to its answer sent, by method",
      labelNames: ['method'] as const,
      buckets: DURATION_BUCKETS,
    });
    this.#version = m.gauge({
      name: 'sluice_rules_version',
      help: 'The active rule version (0: none yet); during a rollout also one per cohort',
      labelNames: ['cohort'] as const,
    });
    this.#version.set(0);
    this.#ruleChanges = m.counter({
      name: 'sluice_rule_resources_changed_total',
      help: 'Resources added, changed or removed by rule versions becoming active',
      labelNames: ['change'] as const,
    });
    this.#remaining = m.gauge({
      name: 'sluice_remaining_permits',
      help: 'Permits left on the deciding limit after the latest decision of a resource',
      labelNames: ['resource'] as const,
    });
    this.#fallbacks = m.counter({
      name: 'sluice_fallback_decisions_total',
      help: 'Decisions made by the store-failure policy while the store was unavailable',
      labelNames: ['resource'] as const,
    });
    this.#prefilter = m.counter({
      name: 'sluice_prefilter_rejections_total',
      help: 'Denials made locally for keys known to be over their limit, without a store round trip',
      labelNames: ['resource'] as const,
    });
    this.#bookings = m.counter({
      name: 'sluice_booking_outcomes_total',
      help: 'Booking calls (book, claim, checks with a booking id) by outcome: admitted, booked, claimed, denied, missing',
      labelNames: ['resource', 'outcome'] as const,
    });
    this.#overridesRefused = m.counter({
      name: 'sluice_envoy_overrides_refused_total',
      help: 'Envoy limit overrides not admitted (the override table was full of overrides in use, or new ones came too fast)',
    });
    this.#cuts = m.counter({
      name: 'sluice_connections_closed_total',
      help: 'Connections the server closed: over a connection cap, a request not received in time, a malformed request',
      labelNames: ['listener', 'reason'] as const,
    });
    this.#open = m.gauge({
      name: 'sluice_connections_open',
      help: 'Connections open on each listener (within its caps), until their sockets have closed',
      labelNames: ['listener'] as const,
    });
    this.#warnings = m.counter({
      name: 'sluice_warnings_total',
      help: 'Warnings by event, each counted although repeats are logged only as a summary',
      labelNames: ['event'] as const,
    });
    this.#adaptiveMoves = m.counter({
      name: 'sluice_adaptive_moves_total',
      help: 'Moves of adaptive limits applied by this server (each a rule version), by resource and direction',
      labelNames: ['resource', 'direction'] as const,
    });
    this.#adaptiveLimit = m.gauge({
      name: 'sluice_adaptive_limit',
      help: 'The moved limit of each adaptive resource in the active rule version',
      labelNames: ['resource'] as const,
    });
    this.clockSkew = createClockSkewObserver({ registry: this.registry });
    // Hot keys are counted per resource and action, never labelled by key (callers choose keys).
    this.#hotMitigated = m.gauge({
      name: 'sluice_hot_keys_mitigated',
      help: 'Keys mitigated now as hot (their calls leased), by resource and action',
      labelNames: ['resource', 'action'] as const,
    });
    this.#hotMitigations = m.counter({
      name: 'sluice_hot_key_mitigations_total',
      help: 'Hot-key mitigations started, by resource and action',
      labelNames: ['resource', 'action'] as const,
    });
    this.#boosted = m.counter({
      name: 'sluice_boosted_decisions_total',
      help: "Calls the boost pool admitted after the resource's limits denied them, by tier ('' on resources without declared tiers)",
      labelNames: ['resource', 'tier'] as const,
    });
    this.#tierDecisions = m.counter({
      name: 'sluice_tier_decisions_total',
      help: 'Decisions on resources that declare priority tiers, by tier and outcome (allowed, boosted, denied)',
      labelNames: ['resource', 'tier', 'outcome'] as const,
    });
    // The server's own version is the build's: the core's would be a second series.
    const core = createPrometheusObserver({ registry: this.registry, buildInfo: false });
    const durations = this.registry.getSingleMetric('sluice_decision_duration_seconds');
    if (!(durations instanceof SeriesHistogram)) throw new Error('sluice_decision_duration_seconds is not a SeriesHistogram');
    this.decisionDurations = durations;
    this.observer = {
      decided: (e) => {
        const resource = e.resource.startsWith(OVERRIDE_RESOURCE_PREFIX) ? OVERRIDES : e.resource;
        core.decided?.(resource === e.resource ? e : { ...e, resource });
        this.#decided(resource, e.decision);
        if (e.tier !== undefined || e.decision.boosted === true) this.#tiered(resource, e.decision, e.tier);
      },
      storeSwitched: (e) => core.storeSwitched?.(e),
      storeCalled: (e) => core.storeCalled?.(e),
      waited: (e) => core.waited?.(e),
      keyTableFull: (e) => core.keyTableFull?.(e),
      fleetBreakerChanged: (e) => core.fleetBreakerChanged?.(e),
      outcomesFailed: (e) => core.outcomesFailed?.(e),
      hotKey: (e) => {
        const labels = {
          resource: e.resource.startsWith(OVERRIDE_RESOURCE_PREFIX) ? OVERRIDES : e.resource,
          action: e.mitigation,
        };
        if (e.active) {
          this.#hotMitigated.inc(labels);
          this.#hotMitigations.inc(labels);
        } else this.#hotMitigated.dec(labels);
      },
    };
  }

  #decided(resource: string, d: Decision): void {
    let t = this.#tallies.get(resource);
    if (t === undefined) {
      t = { allowed: 0, denied: 0, shadowDenied: 0, limit: 0, remaining: 0 };
      this.#tallies.set(resource, t);
    }
    if (d.allowed) t.allowed++;
    else t.denied++;
    if (d.shadow) t.shadowDenied++;
    t.limit = d.limit;
    t.remaining = d.remaining;
    this.#remaining.set({ resource }, d.remaining);
    if (d.source === 'fallback') this.#fallbacks.inc({ resource });
    if (d.source === 'prefilter' && !d.allowed) this.#prefilter.inc({ resource });
    if (d.booking !== undefined) this.#bookings.inc({ resource, outcome: d.booking.outcome });
  }

  /** A decision of a tiered resource, or a boosted one (tier labels come from the rules: bounded). */
  #tiered(resource: string, d: Decision, tier: string | undefined): void {
    const t = this.#tallies.get(resource)!;
    const boosted = d.boosted === true;
    if (boosted) {
      this.#boosted.inc({ resource, tier: tier ?? '' });
      t.boosted = (t.boosted ?? 0) + 1;
    }
    if (tier === undefined) return;
    const outcome = boosted ? 'boosted' : d.allowed ? 'allowed' : 'denied';
    this.#tierDecisions.inc({ resource, tier, outcome });
    t.tiers ??= new Map();
    let n = t.tiers.get(tier);
    if (n === undefined) {
      // Bounded: a resource declares at most MAX_TIERS tiers, and unknown tiers are refused.
      n = { allowed: 0, denied: 0, boosted: 0, shadowDenied: 0 };
      t.tiers.set(tier, n);
    }
    if (d.allowed) n.allowed++;
    else n.denied++;
    if (boosted) n.boosted++;
    if (d.shadow) n.shadowDenied++;
  }

  /** An HTTP request answered after `seconds`; `route` from the route table (bounded), `method` as parsed (a fixed set). */
  httpRequest(route: string, method: string, status: number, seconds: number): void {
    this.#http.inc({ route, method, status: String(status) });
    let byMethod = this.#httpSeries.get(route);
    if (byMethod === undefined) {
      byMethod = new Map();
      this.#httpSeries.set(route, byMethod);
    }
    let series = byMethod.get(method);
    if (series === undefined) {
      series = this.#httpDurations.series({ route, method });
      byMethod.set(method, series);
    }
    series.observe(seconds);
  }

  /** A gRPC call answered with `code` after `seconds` (`method`: one of the server's own). */
  grpcRequest(method: string, code: number, seconds: number): void {
    this.#grpc.inc({ method, code: String(code) });
    let series = this.#grpcSeries.get(method);
    if (series === undefined) {
      series = this.#grpcDurations.series({ method });
      this.#grpcSeries.set(method, series);
    }
    series.observe(seconds);
  }

  /** An Envoy limit override was not admitted to the override table. */
  overrideRefused(): void {
    this.#overridesRefused.inc();
  }

  connectionClosed(listener: 'http' | 'grpc', reason: ConnectionCut): void {
    this.#cuts.inc({ listener, reason });
  }

  /** A connection within the caps opened (`1`) or its socket closed (`-1`). */
  connectionsOpen(listener: 'http' | 'grpc', delta: 1 | -1): void {
    this.#open.inc({ listener }, delta);
  }

  /** Counts a warning (the event names are the server's own, a fixed set). */
  warning(event: string): void {
    this.#warnings.inc({ event });
  }

  rulesApplied(version: number, added: number, changed: number, removed: number): void {
    this.#version.set(version);
    if (added > 0) this.#ruleChanges.inc({ change: 'added' }, added);
    if (changed > 0) this.#ruleChanges.inc({ change: 'changed' }, changed);
    if (removed > 0) this.#ruleChanges.inc({ change: 'removed' }, removed);
  }

  /** Per-resource figures, for resources still `active`. */
  stats(active: (resource: string) => boolean): ResourceStats[] {
    return [...this.#tallies]
      .filter(([resource]) => active(resource))
      .map(([resource, { tiers, ...t }]) => ({
        resource,
        ...t,
        ...(tiers === undefined ? {} : { tiers: [...tiers].map(([tier, n]) => ({ tier, ...n })) }),
      }))
      .sort((a, b) => a.resource.localeCompare(b.resource));
  }

  /** An adaptive limit moved (applied by this server). */
  adaptiveMoved(resource: string, direction: 'up' | 'down'): void {
    this.#adaptiveMoves.inc({ resource, direction });
  }

  /** The adaptive limits of the active version (resources not listed are dropped). */
  adaptiveLimits(limits: ReadonlyMap<string, number>): void {
    this.#adaptiveLimit.reset();
    for (const [resource, value] of limits) this.#adaptiveLimit.set({ resource }, value);
  }
}

/**
 * The rollout's figures: the rule version each cohort is decided by
 * (`sluice_rules_version{cohort}`, beside the unlabelled active version), the share of keys on
 * the candidate (`sluice_rollout_ratio`, 0..1), and the automatic rollbacks.
 */
export class RolloutMetrics {
  readonly #version: Gauge<'cohort'>;
  readonly #ratio: Gauge;
  readonly #rollbacks: Counter;

  constructor(metrics: ServerMetrics) {
    const m = promMetrics({ registry: metrics.registry });
    // The same metric as the unlabelled active version: a series per cohort beside it.
    this.#version = metrics.registry.getSingleMetric('sluice_rules_version') as Gauge<'cohort'>;
    this.#ratio = m.gauge({
      name: 'sluice_rollout_ratio',
      help: 'Share of keys on the candidate rule version, 0..1 (0: no rollout)',
    });
    this.#rollbacks = m.counter({
      name: 'sluice_rollout_rollbacks_total',
      help: 'Rollouts rolled back automatically by this server',
    });
    this.#ratio.set(0);
  }

  /**
   * The versions in force: `baseline` for the baseline cohort, and during a rollout `candidate`,
   * the version the candidate is recorded as when promoted (baseline + 1); `percent` of the keys
   * are on the candidate (exported as a ratio).
   */
  cohorts(baseline: number, candidate: number | undefined, percent: number): void {
    this.#version.set({ cohort: 'baseline' }, baseline);
    if (candidate === undefined) this.#version.remove({ cohort: 'candidate' });
    else this.#version.set({ cohort: 'candidate' }, candidate);
    this.#ratio.set(percent / 100);
  }

  rolledBack(): void {
    this.#rollbacks.inc();
  }
}
