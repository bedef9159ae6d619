import type { ResourceStats } from '../metrics.js';
import { request } from './client.js';
import type { Out } from './rules.js';

/** What `GET /v1/stats` answers. */
export interface StatsSnapshot {
  /** Server time of the snapshot, ms since the epoch. */
  readonly at: number;
  readonly version: number;
  readonly resources: readonly ResourceStats[];
}

/** One row of the status view. */
export interface StatusRow {
  readonly resource: string;
  /** Decisions per second between the two snapshots. */
  readonly rate: number;
  readonly deniedRate: number;
  readonly limit: number;
  readonly remaining: number;
  /** Share of decisions denied since the server started. */
  readonly rejectedShare: number;
}

/** The busiest resources between two snapshots, busiest first. */
export function statusRows(prev: StatsSnapshot, cur: StatsSnapshot, top: number): StatusRow[] {
  const seconds = Math.max(0.001, (cur.at - prev.at) / 1000);
  const before = new Map(prev.resources.map((r) => [r.resource, r]));
  return cur.resources
    .map((r) => {
      const p = before.get(r.resource);
      const total = r.allowed + r.denied;
      const delta = total - (p === undefined ? 0 : p.allowed + p.denied);
      const deniedDelta = r.denied - (p?.denied ?? 0);
      return {
        resource: r.resource,
        rate: Math.max(0, delta) / seconds,
        deniedRate: Math.max(0, deniedDelta) / seconds,
        limit: r.limit,
        remaining: r.remaining,
        rejectedShare: total === 0 ? 0 : r.denied / total,
      };
    })
    .sort((a, b) => b.rate - a.rate || b.deniedRate - a.deniedRate || a.resource.localeCompare(b.resource))
    .slice(0, top);
}

const fmt = (n: number) => (n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2));

/** One frame of the status view as text. */
export function renderStatus(server: string, prev: StatsSnapshot, cur: StatsSnapshot, top: number): string {
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
  return [title, '', ...lines, ...(rows.length === 0 ? ['(no decisions yet)'] : [])].join('\n');
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
    const frame = renderStatus(o.server, prev, cur, o.top);
    if (o.once) {
      out.log(frame);
      return;
    }
    out.log(`\x1b[2J\x1b[H${frame}`);
    prev = cur;
  }
}
