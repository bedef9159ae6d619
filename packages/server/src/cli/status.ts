import { request } from './client.js';
import type { Out } from './rules.js';
import { formatRate as fmt, statusRows, type StatsSnapshot } from '../stats/rates.js';

/** A rollout as `GET /v1/rollout` summarizes it (what the status view shows of it). */
export interface RolloutLine {
  readonly id: string;
  readonly status: string;
  readonly baseline: number;
  readonly version?: number;
  readonly percent: number;
  readonly step: number;
  readonly steps: readonly unknown[];
  readonly resources: readonly string[];
  readonly note?: string;
}

/** The status view's rollout line: which version each cohort is decided by, and the share. */
export function renderRollout(r: RolloutLine | null | undefined): string | undefined {
  if (r === null || r === undefined) return undefined;
  const live = r.status === 'running' || r.status === 'paused';
  const cohorts = live
    ? `baseline v${r.baseline} / candidate ${r.percent}% of keys of ${r.resources.join(', ')}`
    : `v${r.baseline} -> ${r.version === undefined ? 'not applied' : `v${r.version}`}`;
  const step = live ? `  step ${r.step + 1}/${r.steps.length}` : '';
  return `rollout ${r.id.slice(0, 8)} ${r.status}: ${cohorts}${step}${r.note === undefined ? '' : `  (${r.note})`}`;
}

/** One frame of the status view as text. */
export function renderStatus(
  server: string,
  prev: StatsSnapshot,
  cur: StatsSnapshot,
  top: number,
  rollout?: RolloutLine | null,
): string {
  const rows = statusRows(prev, cur, top);
  const header = ['RESOURCE', 'RATE/s', 'DENIED/s', 'LIMIT', 'REMAINING', 'REJECTED'];
  const table = [
    header,
    ...rows.map((r) => [
      r.resource,
      fmt(r.rate),
      fmt(r.deniedRate),
      String(r.limit),
      String(Math.floor(r.remaining)),
      `${(r.rejectedShare * 100).toFixed(1)}%`,
    ]),
  ];
  const widths = header.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  const lines = table.map((row) => row.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  '));
  const title = `sluice status  ${server}  rules v${cur.version}  ${new Date(cur.at).toISOString()}`;
  const rolloutLine = renderRollout(rollout);
  return [
    title,
    ...(rolloutLine === undefined ? [] : [rolloutLine]),
    '',
    ...lines,
    ...(rows.length === 0 ? ['(no decisions yet)'] : []),
  ].join('\n');
}

/** Options of {@link runStatus}. */
export interface StatusOptions {
  readonly server: string;
  readonly once: boolean;
  readonly intervalMs: number;
  readonly top: number;
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
  const fetchStats = () => request<StatsSnapshot>(o.server, '/v1/stats');
  let prev = await fetchStats();
  for (;;) {
    await sleep(o.intervalMs, o.signal);
    if (o.signal?.aborted) return;
    const cur = await fetchStats();
    // A server without a rollout store (or an older one) has no /v1/rollout.
    const rollout = await request<{ rollout: RolloutLine | null }>(o.server, '/v1/rollout').then(
      (r) => r.rollout,
      () => null,
    );
    const frame = renderStatus(o.server, prev, cur, o.top, rollout);
    if (o.once) {
      out.log(frame);
      return;
    }
    out.log(`\x1b[2J\x1b[H${frame}`);
    prev = cur;
  }
}
