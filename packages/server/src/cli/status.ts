import { request } from './client.js';
import type { Out } from './rules.js';
import { formatRate as fmt, statusRows, type StatsSnapshot } from '../stats/rates.js';
import { hotKeyLines } from '../stats/hot-keys.js';
import { clockSkewSummary, type ClockSkewView } from '../stats/clock.js';
import { healthSummary } from '../stats/health.js';

/** A `/v1/stats` snapshot with the server's clock skew (servers before it answer none). */
export type StatusSnapshot = StatsSnapshot & { readonly clockSkew?: ClockSkewView };

/** `GET /v1/breakers`: the fleet-wide breakers (see `BreakerView`). */
export interface BreakersSnapshot {
  readonly breakers: readonly {
    readonly resource: string;
    readonly state: string;
    readonly policy: { readonly windowMs: number; readonly halfOpenProbes: number };
    readonly window?: { readonly calls: number; readonly failures: number; readonly slow: number };
  }[];
}

/** The fleet-wide breakers as lines of text (none: no lines). */
export function renderBreakers(snapshot: BreakersSnapshot | undefined): string[] {
  const list = snapshot?.breakers ?? [];
  if (list.length === 0) return [];
  const header = ['BREAKER', 'STATE', 'CALLS', 'FAILED', 'SLOW', 'WINDOW', 'PROBES'];
  const table = [
    header,
    ...list.map((b) => [
      b.resource,
      b.state.toUpperCase(),
      b.window === undefined ? '?' : String(b.window.calls),
      b.window === undefined ? '?' : String(b.window.failures),
      b.window === undefined ? '?' : String(b.window.slow),
      `${b.policy.windowMs / 1000}s`,
      String(b.policy.halfOpenProbes),
    ]),
  ];
  const widths = header.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  return [
    '',
    ...table.map((row) =>
      row
        .map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
        .join('  ')
        .trimEnd(),
    ),
  ];
}

/** A rollout as `GET /v1/rollout` summarizes it (what the status view shows of it). */
export interface RolloutLine {
  /** The admin view's id (the public summary leaves it out). */
  readonly id?: string;
  readonly status: string;
  readonly baseline: number;
  readonly version?: number;
  readonly percent: number;
  readonly step: number;
  readonly steps: readonly unknown[];
  readonly resources: readonly string[];
  readonly domains?: readonly string[];
  readonly note?: string;
}

/** The status view's rollout line: which version each cohort is decided by, and the share. */
export function renderRollout(r: RolloutLine | null | undefined): string | undefined {
  if (r === null || r === undefined) return undefined;
  const live = r.status === 'running' || r.status === 'paused';
  const cohorts = live
    ? `baseline v${r.baseline} / candidate ${r.percent}% of keys of ${[...r.resources, ...(r.domains ?? []).map((d) => `domain ${d}`)].join(', ')}`
    : `v${r.baseline} -> ${r.version === undefined ? 'not applied' : `v${r.version}`}`;
  const step = live ? `  step ${r.step + 1}/${r.steps.length}` : '';
  return `rollout ${r.id === undefined ? '' : `${r.id.slice(0, 8)} `}${r.status}: ${cohorts}${step}${r.note === undefined ? '' : `  (${r.note})`}`;
}

/** Padded columns: the first `left` left-aligned (names), the rest right-aligned (figures). */
function columns(table: readonly (readonly string[])[], left: number): string[] {
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  return table.map((row) =>
    row
      .map((c, i) => (i < left ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join('  ')
      .trimEnd(),
  );
}

const percent = (share: number) => `${(share * 100).toFixed(1)}%`;

/**
 * One frame of the status view as text: the title (with the period the rates are over), the
 * health line (the store, the fallback's decisions, the clients, the p99 latency), then per
 * resource its rates per second between the two snapshots, the latest decision's limit and
 * remaining permits, and its shares of decisions since the server started. Shadow-mode denials
 * (admitted, but the limit would have denied them) are shown beside every denial.
 */
export function renderStatus(
  server: string,
  prev: StatsSnapshot,
  cur: StatusSnapshot,
  top: number,
  breakers?: BreakersSnapshot,
  rollout?: RolloutLine | null,
): string {
  const rows = statusRows(prev, cur, top);
  const table = [
    [
      'RESOURCE',
      'ALLOWED/s',
      'DENIED/s',
      'SHADOW DENIED/s',
      'LIMIT',
      'REMAINING',
      'DENIED % SINCE START',
      'SHADOW DENIED % SINCE START',
    ],
    ...rows.map((r) => [
      r.resource,
      fmt(r.allowedRate),
      fmt(r.deniedRate),
      fmt(r.shadowDeniedRate),
      String(r.limit),
      String(Math.floor(r.remaining)),
      percent(r.deniedShareSinceStart),
      percent(r.shadowDeniedShareSinceStart),
    ]),
  ];
  const seconds = Math.max(0, (cur.at - prev.at) / 1000);
  const title = `sluice status  ${server}  rules v${cur.version}  ${new Date(cur.at).toISOString()}  (rates per second over the last ${seconds.toFixed(1)} s)`;
  // The server's clock against its store's, under the table (servers before it report none).
  const clock = cur.clockSkew === undefined ? [] : ['', clockSkewSummary(cur.clockSkew).text];
  const rolloutLine = renderRollout(rollout);
  return [
    title,
    healthSummary(cur.health).text,
    ...(rolloutLine === undefined ? [] : [rolloutLine]),
    '',
    ...columns(table, 1),
    ...(rows.length === 0 ? ['(no decisions yet)'] : []),
    ...adaptiveLines(cur),
    ...renderBreakers(breakers),
    ...hotKeyLines(cur.hotKeys, top),
    ...renderTiers(prev, cur),
    ...clock,
  ].join('\n');
}

/**
 * The adaptive limits, under the resources: what each is now and its bounds (calls per the
 * window beside them), and its last move (`?` while the store cannot say).
 */
function adaptiveLines(cur: StatsSnapshot): string[] {
  const rows = cur.adaptive ?? [];
  if (rows.length === 0) return [];
  const table = [
    ['ADAPTIVE', 'POLICY', 'LIMIT', 'MIN', 'MAX', 'WINDOW', 'LAST MOVE'],
    ...rows.map((a) => [
      a.resource,
      a.policy,
      String(a.limit),
      String(a.min),
      String(a.max),
      // Servers before the field answer none.
      typeof a.windowMs === 'number' ? `${a.windowMs / 1000}s` : '?',
      a.lastMoveAt ?? (a.lastMoveUnknown === true ? '?' : '-'),
    ]),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  return ['', ...table.map((row) => row.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  '))];
}

/**
 * The tiers block, below the table when a resource declares priority tiers or has boosted
 * calls: per tier, its rates between the snapshots and its boosted calls since start.
 */
export function renderTiers(prev: StatsSnapshot, cur: StatsSnapshot): string[] {
  const seconds = Math.max(0.001, (cur.at - prev.at) / 1000);
  const before = new Map(prev.resources.map((r) => [r.resource, r]));
  const rows: string[][] = [];
  for (const r of cur.resources) {
    const then = new Map((before.get(r.resource)?.tiers ?? []).map((t) => [t.tier, t]));
    for (const t of r.tiers ?? []) {
      const p = then.get(t.tier);
      const rate = (now: number, old: number | undefined) => fmt(Math.max(0, now - (old ?? 0)) / seconds);
      // Servers before shadow counts per tier report none.
      const shadow = (x: { shadowDenied?: number } | undefined) => x?.shadowDenied ?? 0;
      rows.push([
        r.resource,
        t.tier,
        rate(t.allowed, p?.allowed),
        rate(t.denied, p?.denied),
        rate(shadow(t), p === undefined ? undefined : shadow(p)),
        String(t.boosted),
      ]);
    }
    if ((r.tiers ?? []).length === 0 && (r.boosted ?? 0) > 0) rows.push([r.resource, '-', '-', '-', '-', String(r.boosted)]);
  }
  if (rows.length === 0) return [];
  return ['', ...columns([['RESOURCE', 'TIER', 'ALLOWED/s', 'DENIED/s', 'SHADOW DENIED/s', 'BOOSTED SINCE START'], ...rows], 2)];
}

/** Options of {@link runStatus}. */
export interface StatusOptions {
  readonly server: string;
  readonly once: boolean;
  readonly intervalMs: number;
  readonly top: number;
  /** The admin token: with it the hot keys are named, without it only counted. */
  readonly token?: string;
  /** Ends the live view (SIGINT). */
  readonly signal?: AbortSignal;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        resolve();
      },
      { once: true },
    );
  });

/** The live view: one frame per interval (or one frame with `once`), rates from consecutive snapshots. */
export async function runStatus(o: StatusOptions, out: Out): Promise<void> {
  const fetchStats = () => request<StatusSnapshot>(o.server, '/v1/stats', { token: o.token });
  let prev = await fetchStats();
  for (;;) {
    await sleep(o.intervalMs, o.signal);
    if (o.signal?.aborted) return;
    const cur = await fetchStats();
    // A server without fleet breakers' endpoint (an older version) shows none.
    const breakers = await request<BreakersSnapshot>(o.server, '/v1/breakers').catch(() => undefined);
    // A server without a rollout store (or an older one) has no /v1/rollout.
    const rollout = await request<{ rollout: RolloutLine | null }>(o.server, '/v1/rollout').then(
      (r) => r.rollout,
      () => null,
    );
    const frame = renderStatus(o.server, prev, cur, o.top, breakers, rollout);
    if (o.once) {
      out.log(frame);
      return;
    }
    out.log(`\x1b[2J\x1b[H${frame}`);
    prev = cur;
  }
}
