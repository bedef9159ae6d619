import { request } from './client.js';
import type { Out } from './rules.js';
import { formatRate as fmt, statusRows, type StatsSnapshot } from '../stats/rates.js';
import { hotKeyLines } from '../stats/hot-keys.js';

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
  return [title, '', ...lines, ...(rows.length === 0 ? ['(no decisions yet)'] : []), ...hotKeyLines(cur.hotKeys, top)].join('\n');
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
