/**
 * The `health` field of `GET /v1/stats`: the limit store and what answers while it is away, the
 * decisions the fallback made, the remote clients seen and the decisions' p99 latency; and its
 * line of text, shared by `sluice status` and the web dashboard.
 *
 * This module runs in the browser too (the dashboard loads its compiled form as an ES module):
 * it must import nothing at run time and use nothing of Node.
 */
import type { StoreHealth } from '@sluice/core';

/** What `GET /v1/stats` answers as `health`. */
export interface HealthView {
  /** The limit store: `redis`, or `memory` (the embedded store). */
  readonly store: string;
  /** Where the store is (`10.0.0.5:6379`, a cluster's seed nodes); absent for the embedded store. */
  readonly address?: string;
  /** False while the store is away: decisions then follow the store-failure policies. */
  readonly reachable: boolean;
  /** The default store-failure policy (`--on-store-failure`): `local`, `open` or `closed`. */
  readonly policy: StoreHealth['policy'];
  /** Every resource's policy in words, as the log names them: `the 'local' policy ('closed' for api:payments)`. */
  readonly policies: string;
  /** While the store is away: for how long, in ms. */
  readonly unreachableForMs?: number;
  /** While the store is away: its latest failure (`ECONNREFUSED 10.0.0.5:6379`). */
  readonly reason?: string;
  /** Decisions made by the store-failure policies since the server started. */
  readonly fallbackDecisions: number;
  /** Live remote clients (by `sluice-client-id`; see ClientCounter). */
  readonly clientsSeen: number;
  /**
   * The 99th percentile of decision latency over the last {@link decisionP99WindowSeconds}, in
   * seconds; absent when no decision was made in that window (or the server does not measure it).
   */
  readonly decisionP99Seconds?: number;
  /** The window the p99 is over, in seconds (60); absent when the server does not measure it. */
  readonly decisionP99WindowSeconds?: number;
}

/**
 * Where the p99 of decision latency comes from (the server's decision-duration histogram over a
 * recent window): the window, and the p99 when a decision was made in it.
 */
export type DecisionLatency = () => { readonly windowSeconds: number; readonly p99Seconds?: number } | undefined;

/** The health view of `store` with the server's own figures. */
export function healthView(store: StoreHealth, clientsSeen: number, latency?: DecisionLatency): HealthView {
  const measured = latency?.();
  const p99 = measured?.p99Seconds;
  return {
    ...store,
    clientsSeen,
    ...(p99 === undefined || !Number.isFinite(p99) ? {} : { decisionP99Seconds: p99 }),
    ...(measured === undefined ? {} : { decisionP99WindowSeconds: measured.windowSeconds }),
  };
}

/** What `sluice status` and the dashboard show: a line and its state. */
export interface HealthSummary {
  readonly text: string;
  /** `ok` while the store answers, `degraded` while the policies decide, `unknown` without a report. */
  readonly state: 'ok' | 'degraded' | 'unknown';
}

/** One figure of the health: what it is (with its period) and its value, as the dashboard's strip shows it. */
export interface HealthFigure {
  /** Which figure: stable, for the page's elements. */
  readonly name: 'store' | 'fallback' | 'clients' | 'latency';
  /** What the figure is, with its period (`live clients`). */
  readonly label: string;
  readonly value: string;
  /** `degraded` for the store while it is away. */
  readonly state: 'ok' | 'degraded';
}

/** A duration for people: ms below a second, then seconds. */
function duration(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : ms < 60_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`;
}

/** A latency for people: two significant figures below 10 ms. */
function latency(ms: number): string {
  return ms < 1 ? `${ms.toFixed(2)} ms` : ms < 10 ? `${ms.toFixed(1)} ms` : duration(ms);
}

/**
 * The health's figures, each labelled with its period: the store (reachable, or UNREACHABLE for
 * how long, why, and the policy answering), the fallback's decisions since start, the clients
 * seen in the last minute, and the p99 decision latency over its window (`no decisions` when
 * none was made in it, `not measured` from a server that does not measure it).
 */
export function healthFigures(view: HealthView): HealthFigure[] {
  const at = view.address === undefined ? '' : ` at ${view.address}`;
  const store: HealthFigure = view.reachable
    ? { name: 'store', label: `store ${view.store}${at}`, value: 'reachable', state: 'ok' }
    : {
        name: 'store',
        label: `store ${view.store}${at}`,
        value:
          `UNREACHABLE${view.unreachableForMs === undefined ? '' : ` for ${duration(view.unreachableForMs)}`}` +
          `${view.reason === undefined ? '' : ` (${view.reason})`}, deciding by ${view.policies}`,
        state: 'degraded',
      };
  const window = view.decisionP99WindowSeconds;
  const p99 =
    view.decisionP99Seconds !== undefined
      ? latency(view.decisionP99Seconds * 1000)
      : window === undefined
        ? 'not measured'
        : 'no decisions';
  return [
    store,
    { name: 'fallback', label: 'fallback decisions since start', value: String(view.fallbackDecisions), state: 'ok' },
    { name: 'clients', label: 'live clients', value: String(view.clientsSeen), state: 'ok' },
    {
      name: 'latency',
      label: `p99 decision latency${window === undefined ? '' : ` (last ${window} s)`}`,
      value: p99,
      state: 'ok',
    },
  ];
}

/**
 * The health in one line, each figure labelled with its period, e.g. `store redis at
 * 10.0.0.5:6379: reachable  |  fallback decisions since start: 0  |  live clients:
 * 3  |  p99 decision latency (last 60 s): 1.2 ms`. While the store is away the line says since
 * when, why, and the policy answering.
 */
export function healthSummary(view: HealthView | undefined): HealthSummary {
  if (view === undefined) return { text: 'health: not reported by this server', state: 'unknown' };
  const text = healthFigures(view)
    .map((f) => `${f.label}: ${f.value}`)
    .join('  |  ');
  return { text, state: view.reachable ? 'ok' : 'degraded' };
}
