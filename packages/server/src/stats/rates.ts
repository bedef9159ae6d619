import type { AdaptiveStatus } from '../control/adaptive/controller.js';
/**
 * Rates from `GET /v1/stats` snapshots, shared by `sluice status` and the web dashboard. The
 * counters are totals since the server started, so a rate is the difference between two
 * snapshots over the time between them.
 *
 * This module runs in the browser too (the dashboard loads its compiled form as an ES module):
 * it must import nothing at run time and use nothing of Node.
 */
import type { HotKeyReport } from '@sluice/core';
import type { ResourceStats } from '../metrics.js';
import type { HealthView } from './health.js';

/** What `GET /v1/stats` answers. */
export interface StatsSnapshot {
  /** Server time of the snapshot, ms since the epoch. */
  readonly at: number;
  readonly version: number;
  readonly resources: readonly ResourceStats[];
  /** The adaptive limits of the active rules (servers that predate them leave it out). */
  readonly adaptive?: readonly AdaptiveStatus[];
  /** The heaviest keys of resources that track them (absent from servers before hot keys). */
  readonly hotKeys?: readonly HotKeyReport[];
  /** The store's health and the server's figures (absent from servers before it). */
  readonly health?: HealthView;
}

/**
 * One resource between two snapshots: rates per second over the time between them, the latest
 * decision's limit and remaining permits, and shares of every decision since the server started.
 */
export interface StatusRow {
  readonly resource: string;
  /** Decisions per second (allowed and denied). */
  readonly rate: number;
  /** Decisions allowed per second, shadow-mode ones included. */
  readonly allowedRate: number;
  readonly deniedRate: number;
  /** Decisions allowed per second only because the resource is in shadow mode (the limit would have denied them). */
  readonly shadowDeniedRate: number;
  readonly limit: number;
  readonly remaining: number;
  /** Share of decisions denied since the server started. */
  readonly deniedShareSinceStart: number;
  /** Share of decisions the limit would have denied in shadow mode since the server started. */
  readonly shadowDeniedShareSinceStart: number;
}

/** A {@link StatusRow}, as the dashboard charts it. */
export type RateRow = StatusRow;

/** Busiest first: by rate, then by denied rate, then by name. */
function busiestFirst(a: StatusRow, b: StatusRow): number {
  return b.rate - a.rate || b.deniedRate - a.deniedRate || a.resource.localeCompare(b.resource);
}

/**
 * Every resource of `cur` with its rates since `prev`, busiest first. A counter that went down
 * (the server restarted) counts as zero, never as a negative rate.
 */
export function rateRows(prev: StatsSnapshot, cur: StatsSnapshot): RateRow[] {
  const seconds = Math.max(0.001, (cur.at - prev.at) / 1000);
  const before = new Map(prev.resources.map((r) => [r.resource, r]));
  const perSecond = (now: number, then: number | undefined) => Math.max(0, now - (then ?? 0)) / seconds;
  return cur.resources
    .map((r) => {
      const p = before.get(r.resource);
      const total = r.allowed + r.denied;
      return {
        resource: r.resource,
        rate: perSecond(total, p === undefined ? undefined : p.allowed + p.denied),
        allowedRate: perSecond(r.allowed, p?.allowed),
        deniedRate: perSecond(r.denied, p?.denied),
        shadowDeniedRate: perSecond(r.shadowDenied, p?.shadowDenied),
        limit: r.limit,
        remaining: r.remaining,
        deniedShareSinceStart: total === 0 ? 0 : r.denied / total,
        shadowDeniedShareSinceStart: total === 0 ? 0 : r.shadowDenied / total,
      };
    })
    .sort(busiestFirst);
}

/** The busiest `top` resources between two snapshots, busiest first. */
export function statusRows(prev: StatsSnapshot, cur: StatsSnapshot, top: number): StatusRow[] {
  return rateRows(prev, cur).slice(0, top);
}

/** A rate for people: three significant figures at most, two decimals below 10. */
export function formatRate(n: number): string {
  return n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2);
}

/** One point of a resource's chart. */
export interface RatePoint {
  /** Server time, ms since the epoch. */
  readonly at: number;
  readonly allowedRate: number;
  readonly deniedRate: number;
  readonly shadowDeniedRate: number;
  readonly limit: number;
}

/** Bounds of a {@link RateHistory}. */
export interface RateHistoryOptions {
  /** How far back points are kept, in ms. @default 300000 (5 minutes) */
  readonly windowMs?: number;
  /** Most resources kept; the least busy are dropped first. @default 50 */
  readonly maxResources?: number;
}

/**
 * The recent rates of each resource, bounded in time and in resources, for the dashboard's
 * charts. Feed it every snapshot in order with {@link RateHistory.add}.
 */
export class RateHistory {
  readonly windowMs: number;
  readonly maxResources: number;
  #prev: StatsSnapshot | undefined;
  #series = new Map<string, RatePoint[]>();
  #order: string[] = [];

  constructor(options: RateHistoryOptions = {}) {
    this.windowMs = options.windowMs ?? 300_000;
    this.maxResources = options.maxResources ?? 50;
  }

  /** Adds a snapshot; from the second one on, each resource gets a point. */
  add(snapshot: StatsSnapshot): void {
    const prev = this.#prev;
    this.#prev = snapshot;
    if (prev === undefined || snapshot.at <= prev.at) return;
    const rows = rateRows(prev, snapshot);
    for (const r of rows) {
      let points = this.#series.get(r.resource);
      if (points === undefined) this.#series.set(r.resource, (points = []));
      points.push({
        at: snapshot.at,
        allowedRate: r.allowedRate,
        deniedRate: r.deniedRate,
        shadowDeniedRate: r.shadowDeniedRate,
        limit: r.limit,
      });
    }
    const horizon = snapshot.at - this.windowMs;
    const seen = new Set(rows.map((r) => r.resource));
    for (const [resource, points] of this.#series) {
      const keep = points.findIndex((p) => p.at >= horizon);
      if (keep === -1 || !seen.has(resource)) this.#series.delete(resource);
      else if (keep > 0) points.splice(0, keep);
    }
    // Busiest over the whole window first, so a short lull does not reshuffle the page.
    const load = (resource: string) => (this.#series.get(resource) ?? []).reduce((s, p) => s + p.allowedRate + p.deniedRate, 0);
    this.#order = [...this.#series.keys()].sort((a, b) => load(b) - load(a) || a.localeCompare(b));
    for (const dropped of this.#order.splice(this.maxResources)) this.#series.delete(dropped);
  }

  /** Resource names, busiest over the window first. */
  resources(): readonly string[] {
    return this.#order;
  }

  /** The points of one resource, oldest first. */
  points(resource: string): readonly RatePoint[] {
    return this.#series.get(resource) ?? [];
  }

  /** The latest snapshot added. */
  latest(): StatsSnapshot | undefined {
    return this.#prev;
  }
}

/** One limit as `GET /v1/resources` lists it. */
export interface ListedLimit {
  readonly algorithm: string;
  readonly limit: number;
  readonly windowMs: number;
}

/**
 * The tightest sustained rate, per second and per key, that a resource's limits allow; undefined
 * when no limit is a rate (a `concurrency` limit bounds permits held, not permits per second).
 */
export function limitPerSecond(limits: readonly ListedLimit[]): number | undefined {
  const rates = limits.filter((l) => l.algorithm !== 'concurrency' && l.windowMs > 0).map((l) => (l.limit * 1000) / l.windowMs);
  return rates.length === 0 ? undefined : Math.min(...rates);
}
