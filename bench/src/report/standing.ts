/**
 * `--write-docs`: the "Where things stand" section of docs/benchmarks.md (between its markers),
 * regenerated from this run's summary, its throughput cells (and the chart beside them) and its
 * embedded-store cells.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { format, resolveConfig } from 'prettier';
import { throughputSvg } from './chart.js';
import type { Table } from './table.js';
import { fmtInt, fmtRatio } from './table.js';
import type { ThroughputRow } from '../redis/throughput.js';

const DOCS = fileURLToPath(new URL('../../../docs/benchmarks.md', import.meta.url));
const CHART = fileURLToPath(new URL('../../../docs/benchmarks-throughput.svg', import.meta.url));
const START = '<!-- where-things-stand:start (written by npm run bench -- --write-docs) -->';
const END = '<!-- where-things-stand:end -->';

/** A table as Markdown (pipes escaped). */
export function markdownTable(table: Table): string {
  const cell = (c: string) => c.replace(/\|/g, '\\|');
  const row = (cells: readonly string[]) => `| ${cells.map(cell).join(' | ')} |`;
  const rule = `|${table.header.map((_, i) => ((table.align?.[i] ?? (i === 0 ? 'left' : 'right')) === 'left' ? ' --- ' : ' ---: ')).join('|')}|`;
  return [row(table.header), rule, ...table.rows.map(row)].join('\n') + '\n';
}

/** The throughput cells, peers side by side, as the section shows them. */
export function throughputStanding(rows: readonly ThroughputRow[]): Table {
  return {
    title: 'Throughput through Redis',
    header: [
      'in flight',
      'keys',
      'Sluice/s',
      'reference/s',
      'RLF/s',
      'Sluice/reference',
      'Sluice/RLF',
      'p99 Sluice µs',
      'p99 reference µs',
      'p99 RLF µs',
    ],
    rows: rows.map((r) => [
      String(r.inFlight),
      r.keys === 'many' ? 'many' : 'hot',
      fmtInt(r.sluice.perSec),
      fmtInt(r.reference.perSec),
      fmtInt(r.rlf.perSec),
      fmtRatio(r.sluice.perSec / r.reference.perSec),
      fmtRatio(r.sluice.perSec / r.rlf.perSec),
      fmtInt(r.sluice.p99),
      fmtInt(r.reference.p99),
      fmtInt(r.rlf.p99),
    ]),
  };
}

/** What the section is made of. */
export interface Standing {
  /** How the run was made: command, machine, source, date. */
  readonly context: readonly string[];
  readonly summary: Table;
  readonly throughput: readonly ThroughputRow[] | undefined;
  /** The embedded store beside RLF's memory limiter, when that part ran. */
  readonly embedded?: Table | undefined;
}

/**
 * Replaces the section between the markers of docs/benchmarks.md and writes the chart. The
 * document is written as the repository's Prettier settings format it (its tables padded), so
 * it passes `npm run lint` as written.
 */
export async function writeStanding(standing: Standing): Promise<string[]> {
  const written: string[] = [];
  const parts = [START, '', ...standing.context.map((l) => `${l}  `), '', markdownTable(standing.summary)];
  if (standing.throughput !== undefined && standing.throughput.length > 0) {
    writeFileSync(CHART, throughputSvg(standing.throughput, standing.context[0] ?? ''));
    written.push(CHART);
    parts.push(
      '![Decisions per second and p99 per throughput cell: Sluice, the reference and RLF](benchmarks-throughput.svg)',
      '',
      markdownTable(throughputStanding(standing.throughput)),
    );
  }
  const embedded = standing.embedded;
  if (embedded !== undefined) {
    parts.push(`**${embedded.title}**`, '', markdownTable(embedded));
    if (embedded.notes !== undefined && embedded.notes.length > 0) parts.push(embedded.notes.join('\n'), '');
  }
  parts.push(END);
  const doc = readFileSync(DOCS, 'utf8');
  const from = doc.indexOf(START);
  const to = doc.indexOf(END);
  if (from < 0 || to < from) throw new Error(`${DOCS}: the where-things-stand markers are missing`);
  const text = doc.slice(0, from) + parts.join('\n') + doc.slice(to + END.length);
  writeFileSync(DOCS, await format(text, { ...(await resolveConfig(DOCS)), filepath: DOCS }));
  written.push(DOCS);
  return written;
}
