/**
 * The throughput part as an SVG chart (no dependencies): decisions per second and p99 latency per
 * cell, Sluice beside the reference and RLF. Written by `--write-docs` next to docs/benchmarks.md.
 */
import type { CellResult, ThroughputRow } from '../redis/throughput.js';

const CONTENDERS = [
  { name: 'Sluice', color: '#2563eb', of: (r: ThroughputRow) => r.sluice },
  { name: 'reference', color: '#9ca3af', of: (r: ThroughputRow) => r.reference },
  { name: 'RLF', color: '#f97316', of: (r: ThroughputRow) => r.rlf },
] as const;

const PANEL = { width: 520, height: 300, left: 64, right: 12, top: 40, bottom: 56 } as const;

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** A round step for about `count` ticks up to `max`. */
function step(max: number, count: number): number {
  const raw = max / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const unit = [1, 2, 2.5, 5, 10].find((u) => u * magnitude >= raw) ?? 10;
  return unit * magnitude;
}

function compact(n: number): string {
  if (n >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${+(n / 1e3).toFixed(1)}k`;
  return `${+n.toFixed(1)}`;
}

/**
 * One panel of grouped bars, a group per cell. `scale` maps a value to 0..1 of the plot height;
 * `ticks` are the values to label on the y axis.
 */
function panel(
  x0: number,
  title: string,
  rows: readonly ThroughputRow[],
  value: (c: CellResult) => number,
  scale: (v: number) => number,
  ticks: readonly number[],
): string {
  const plotW = PANEL.width - PANEL.left - PANEL.right;
  const plotH = PANEL.height - PANEL.top - PANEL.bottom;
  const left = x0 + PANEL.left;
  const bottom = PANEL.top + plotH;
  const out: string[] = [
    `<text x="${x0 + PANEL.width / 2}" y="20" text-anchor="middle" font-weight="bold">${escape(title)}</text>`,
  ];
  for (const t of ticks) {
    const y = bottom - scale(t) * plotH;
    out.push(`<line x1="${left}" x2="${left + plotW}" y1="${y}" y2="${y}" stroke="#e5e7eb"/>`);
    out.push(`<text x="${left - 6}" y="${y + 4}" text-anchor="end">${compact(t)}</text>`);
  }
  const group = plotW / rows.length;
  const bar = (group * 0.8) / CONTENDERS.length;
  rows.forEach((row, i) => {
    const gx = left + i * group + group * 0.1;
    CONTENDERS.forEach((c, j) => {
      const v = value(c.of(row));
      const h = Number.isFinite(v) && v > 0 ? Math.max(0, Math.min(1, scale(v))) * plotH : 0;
      const x = gx + j * bar;
      out.push(
        `<rect x="${x.toFixed(1)}" y="${(bottom - h).toFixed(1)}" width="${(bar - 1).toFixed(1)}" height="${h.toFixed(1)}" ` +
          `fill="${c.color}"><title>${escape(`${c.name}, ${row.inFlight} in flight, ${row.keys}: ${compact(v)}`)}</title></rect>`,
      );
    });
    const cx = gx + group * 0.4;
    out.push(`<text x="${cx}" y="${bottom + 16}" text-anchor="middle">${row.inFlight}</text>`);
    out.push(`<text x="${cx}" y="${bottom + 30}" text-anchor="middle" fill="#6b7280">${row.keys}</text>`);
  });
  out.push(`<line x1="${left}" x2="${left + plotW}" y1="${bottom}" y2="${bottom}" stroke="#374151"/>`);
  out.push(`<text x="${left + plotW / 2}" y="${bottom + 48}" text-anchor="middle" fill="#6b7280">calls in flight, keys</text>`);
  return out.join('\n');
}

/** The chart: decisions/s (linear) and p99 in µs (logarithmic), one group of bars per cell. */
export function throughputSvg(rows: readonly ThroughputRow[], caption: string): string {
  const all = rows.flatMap((r) => CONTENDERS.map((c) => c.of(r)));
  const maxRate = Math.max(1, ...all.map((c) => (Number.isFinite(c.perSec) ? c.perSec : 0)));
  const rateStep = step(maxRate, 5);
  const rateTop = Math.ceil(maxRate / rateStep) * rateStep;
  const rateTicks = Array.from({ length: Math.round(rateTop / rateStep) + 1 }, (_, i) => i * rateStep);
  const p99s = all.map((c) => c.p99).filter((v) => Number.isFinite(v) && v > 0);
  const lo = 10 ** Math.floor(Math.log10(Math.min(...p99s, 100)));
  const hi = 10 ** Math.ceil(Math.log10(Math.max(...p99s, 1000)));
  const logTicks: number[] = [];
  for (let t = lo; t <= hi; t *= 10) logTicks.push(t);
  const width = PANEL.width * 2;
  const height = PANEL.height + 40;
  const legend = CONTENDERS.map(
    (c, i) =>
      `<rect x="${PANEL.left + i * 120}" y="${PANEL.height + 8}" width="12" height="12" fill="${c.color}"/>` +
      `<text x="${PANEL.left + i * 120 + 18}" y="${PANEL.height + 19}">${c.name}</text>`,
  ).join('\n');
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ` +
      `font-family="sans-serif" font-size="11">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    panel(
      0,
      'decisions/s (higher is better)',
      rows,
      (c) => c.perSec,
      (v) => v / rateTop,
      rateTicks,
    ),
    panel(
      PANEL.width,
      'p99 latency, µs, log scale (lower is better)',
      rows,
      (c) => c.p99,
      (v) => (Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)),
      logTicks,
    ),
    legend,
    `<text x="${width - 12}" y="${PANEL.height + 19}" text-anchor="end" fill="#6b7280">${escape(caption)}</text>`,
    '</svg>',
    '',
  ].join('\n');
}
