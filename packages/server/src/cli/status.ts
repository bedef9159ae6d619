import { request } from './client.js';
import type { Out } from './rules.js';
import { formatRate as fmt, statusRows, type StatsSnapshot } from '../stats/rates.js';

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
  return [title, '', ...lines, ...(rows.length === 0 ? ['(no decisions yet)'] : []), ...renderTiers(prev, cur)].join('\n');
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
      rows.push([r.resource, t.tier, rate(t.allowed, p?.allowed), rate(t.denied, p?.denied), String(t.boosted)]);
    }
    if ((r.tiers ?? []).length === 0 && (r.boosted ?? 0) > 0) rows.push([r.resource, '-', '-', '-', String(r.boosted)]);
  }
  if (rows.length === 0) return [];
  const table = [['RESOURCE', 'TIER', 'ALLOWED/s', 'DENIED/s', 'BOOSTED'], ...rows];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  const lines = table.map((row) => row.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  '));
  return ['', ...lines];
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
