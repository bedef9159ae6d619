import { request } from './client.js';
import type { Out } from './rules.js';
import { formatRate as fmt, statusRows, type StatsSnapshot } from '../stats/rates.js';
import { clockSkewSummary, type ClockSkewView } from '../stats/clock.js';

/** A `/v1/stats` snapshot with the server's clock skew (servers before it answer none). */
export type StatusSnapshot = StatsSnapshot & { readonly clockSkew?: ClockSkewView };

/** One frame of the status view as text. */
export function renderStatus(server: string, prev: StatsSnapshot, cur: StatusSnapshot, top: number): string {
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
  // The server's clock against its store's, under the table (servers before it report none).
  const clock = cur.clockSkew === undefined ? [] : ['', clockSkewSummary(cur.clockSkew).text];
  return [title, '', ...lines, ...(rows.length === 0 ? ['(no decisions yet)'] : []), ...adaptiveLines(cur), ...clock].join('\n');
}

/** The adaptive limits, under the resources: what each is now, its bounds and its last move. */
function adaptiveLines(cur: StatsSnapshot): string[] {
  const rows = cur.adaptive ?? [];
  if (rows.length === 0) return [];
  const table = [
    ['ADAPTIVE', 'POLICY', 'LIMIT', 'MIN', 'MAX', 'LAST MOVE'],
    ...rows.map((a) => [a.resource, a.policy, String(a.limit), String(a.min), String(a.max), a.lastMoveAt ?? '-']),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  return ['', ...table.map((row) => row.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  '))];
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
  const fetchStats = () => request<StatusSnapshot>(o.server, '/v1/stats');
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
