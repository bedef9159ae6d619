import type { AccuracyResult } from './accuracy.js';
import type { MemoryResult } from './memory.js';
import { fmt, fmtInt, fmtRatio, type Table } from './table.js';
import type { ThroughputRow } from './throughput.js';

/** SPEC targets checked by the summary. */
export const TARGETS = Object.freeze({
  throughputRatio: 3,
  p99Ratio: 1,
  admittedFraction: 0.99,
  memoryMb: 200,
  memoryKeys: 1_000_000,
});

type Row = [target: string, measured: string, verdict: string];

function verdict(ok: boolean): string {
  return ok ? 'PASS' : 'MISS';
}

function throughputRows(rows: readonly ThroughputRow[] | undefined): Row[] {
  if (rows === undefined) return [['Redis: >= 3x RLF throughput, p99 no worse', 'not run', '-']];
  const out: Row[] = [];
  for (const r of rows.filter((x) => x.inFlight >= 16)) {
    const where = `${r.inFlight} in flight, ${r.keys === 'many' ? 'many keys' : 'hot key'}`;
    const tp = r.sluice.perSec / r.rlf.perSec;
    const p99 = r.sluice.p99 / r.rlf.p99;
    const clean = r.sluice.errors === 0;
    out.push([
      `Redis throughput >= ${TARGETS.throughputRatio}x RLF (${where})`,
      `${fmtRatio(tp)} (${fmtInt(r.sluice.perSec)} vs ${fmtInt(r.rlf.perSec)}/s)${clean ? '' : ', with errors'}`,
      verdict(tp >= TARGETS.throughputRatio && clean),
    ]);
    out.push([
      `Redis p99 no worse than RLF (${where})`,
      `${fmtRatio(p99)} (${fmtInt(r.sluice.p99)} vs ${fmtInt(r.rlf.p99)} us)`,
      verdict(p99 <= TARGETS.p99Ratio),
    ]);
  }
  return out;
}

function accuracyRows(results: readonly AccuracyResult[] | undefined): Row[] {
  if (results === undefined) return [['Accuracy: any 1 s window <= limit + burst; >= 0.99 of the limit', 'not run', '-']];
  const out: Row[] = [];
  for (const r of results.filter((x) => x.targeted)) {
    const clean = r.errors === 0;
    const max = r.decidedMax1s ?? r.max1s;
    const clock = r.decidedMax1s === undefined ? 'as arrived' : `by Redis clock; ${fmtInt(r.max1s)} as arrived`;
    // A run that admitted nothing, or failed part of the time, shows nothing about its windows.
    const judged = clean && r.admitted > 0;
    out.push([
      `${r.label}: any 1 s window <= limit + burst (${fmtInt(r.bound1s)})`,
      `max ${fmtInt(max)} (${clock})${judged ? '' : r.admitted > 0 ? ', with errors' : ', nothing admitted'}`,
      verdict(judged && max <= r.bound1s),
    ]);
    out.push([
      `${r.label}: >= ${TARGETS.admittedFraction} of the limit admitted`,
      `${fmt(r.steadyPerSec / r.limit, 3)} (${fmtInt(r.steadyPerSec)}/s)${clean ? '' : ', with errors'}`,
      verdict(r.steadyPerSec / r.limit >= TARGETS.admittedFraction && clean),
    ]);
  }
  return out;
}

function memoryRows(r: MemoryResult | undefined): Row[] {
  const target = `In-memory store: ${fmtInt(TARGETS.memoryKeys)} keys < ${TARGETS.memoryMb} MB`;
  if (r === undefined) return [[target, 'not run', '-']];
  const mib = (r.heapDeltaMb * 1e6) / 2 ** 20;
  const measured = `${fmt(r.heapDeltaMb)} MB (${fmt(mib)} MiB) for ${fmtInt(r.held)} keys${r.gcAvailable ? '' : ' (no --expose-gc)'}`;
  // Without a forced GC the heap holds garbage of unknown size: no verdict either way.
  if (!r.gcAvailable) return [[target, measured, 'not judged']];
  return [[target, measured, verdict(r.held >= TARGETS.memoryKeys && r.heapDeltaMb < TARGETS.memoryMb)]];
}

/** Every SPEC target with the figure measured in this run. */
export function summaryTable(
  throughput: readonly ThroughputRow[] | undefined,
  accuracy: readonly AccuracyResult[] | undefined,
  memory: MemoryResult | undefined,
): Table {
  return {
    title: 'Summary: SPEC targets',
    header: ['target', 'measured', 'result'],
    align: ['left', 'left', 'left'],
    rows: [...throughputRows(throughput), ...accuracyRows(accuracy), ...memoryRows(memory)],
  };
}
