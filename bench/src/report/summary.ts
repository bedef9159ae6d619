import type { AccuracyResult } from '../accuracy/accuracy.js';
import type { ClusterResult } from '../redis/cluster.js';
import type { LeaseCellResult } from '../redis/lease-throughput.js';
import { embeddedVerdicts, type EmbeddedResult } from '../memory/embedded.js';
import type { MemoryResult } from '../memory/memory.js';
import type { OutageResult } from '../redis/outage.js';
import { servicePeersSummaryRows, type PeerResult } from '../service/service-peers.js';
import { fmt, fmtInt, fmtRatio, type Table } from './table.js';
import type { ThroughputRow } from '../redis/throughput.js';

/** SPEC targets checked by the summary. */
export const TARGETS = Object.freeze({
  /** Sluice's decisions/s over the reference's (reference.ts), in every throughput cell. */
  referenceRatio: 0.9,
  /** Sluice's p99 over RLF's, in every throughput cell. */
  p99Ratio: 1,
  admittedFraction: 0.99,
  memoryMb: 200,
  memoryKeys: 1_000_000,
  leasePerSec: 2_000_000,
  leaseAdmittedFraction: 0.97,
  recoveryMs: 1000,
  /** Allowance for timer and event-loop lateness on top of the command timeout. */
  timerSlackMs: 10,
});

type Row = [target: string, measured: string, verdict: string];

function verdict(ok: boolean): string {
  return ok ? 'PASS' : 'MISS';
}

function throughputRows(rows: readonly ThroughputRow[] | undefined): Row[] {
  if (rows === undefined) return [['Redis: >= 0.9x the reference throughput, p99 no worse than RLF', 'not run', '-']];
  const out: Row[] = [];
  for (const r of rows) {
    const where = `${r.inFlight} in flight, ${r.keys === 'many' ? 'many keys' : 'hot key'}`;
    const tp = r.sluice.perSec / r.reference.perSec;
    const p99 = r.sluice.p99 / r.rlf.p99;
    const clean = r.sluice.errors === 0;
    out.push([
      `Redis throughput >= ${TARGETS.referenceRatio}x reference (${where})`,
      `${fmtRatio(tp)} (${fmtInt(r.sluice.perSec)} vs ${fmtInt(r.reference.perSec)}/s; ` +
        `${fmtRatio(r.sluice.perSec / r.rlf.perSec)} RLF)${clean ? '' : ', with errors'}`,
      verdict(tp >= TARGETS.referenceRatio && clean),
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

function leaseRows(cells: readonly LeaseCellResult[] | undefined): Row[] {
  const target = `Leases: > ${fmtInt(TARGETS.leasePerSec)} decisions/s in one process`;
  if (cells === undefined) return [[target, 'not run', '-']];
  const out: Row[] = [];
  for (const keys of [...new Set(cells.map((c) => c.keys))]) {
    const leased = cells.filter((c) => c.lease && c.keys === keys);
    if (leased.length === 0) continue;
    const best = leased.reduce((a, b) => (b.perSec > a.perSec ? b : a));
    const clean = leased.every((c) => c.errors === 0);
    const all = leased.map((c) => `${fmtInt(c.perSec)}/s at ${c.callers} caller${c.callers === 1 ? '' : 's'}`).join(', ');
    out.push([
      `${target} (${keys === 1 ? '1 hot key' : `${fmtInt(keys)} keys`})`,
      `${all}${clean ? '' : ', with errors'}`,
      verdict(best.perSec > TARGETS.leasePerSec && clean),
    ]);
  }
  return out;
}

function leaseAccuracyRows(results: readonly AccuracyResult[] | undefined): Row[] {
  if (results === undefined) {
    return [['Leases, 4 processes: >= 0.97 of the limit admitted; any 1 s window within the lease bound', 'not run', '-']];
  }
  const out: Row[] = [];
  for (const r of results) {
    const clean = r.errors === 0;
    const judged = clean && r.admitted > 0;
    const note = judged ? '' : r.admitted > 0 ? ', with errors' : ', nothing admitted';
    out.push([
      `${r.label}: >= ${TARGETS.leaseAdmittedFraction} of the limit admitted`,
      `${fmt(r.steadyPerSec / r.limit, 3)} (${fmtInt(r.steadyPerSec)}/s)${clean ? '' : ', with errors'}`,
      verdict(r.steadyPerSec / r.limit >= TARGETS.leaseAdmittedFraction && clean),
    ]);
    out.push([
      `${r.label}: any 1 s window <= lease bound (${fmtInt(r.bound1s)})`,
      `max ${fmtInt(r.max1s)} (as arrived)${note}`,
      verdict(judged && r.max1s <= r.bound1s),
    ]);
    out.push([
      `${r.label}: any 1 s window <= limit + burst (${fmtInt(r.limit + r.burst)}), no overshoot`,
      `max ${fmtInt(r.max1s)} (as arrived)${note}`,
      verdict(judged && r.max1s <= r.limit + r.burst),
    ]);
  }
  return out;
}

function outageRows(r: OutageResult | undefined): Row[] {
  if (r === undefined) return [['Store outage: fallback within one timeout, recovery within 1 s, no errors', 'not run', '-']];
  const timeout = r.settings.commandTimeoutMs;
  const out: Row[] = [];
  for (const p of r.policies) {
    const timedOut = p.firstFallbackCallMs >= timeout;
    out.push([
      `Outage, ${p.policy}: fallback within one timeout (${timeout} ms + ${TARGETS.timerSlackMs} ms timer slack) of the kill`,
      Number.isNaN(p.fallbackAfterKillMs)
        ? 'no fallback decision'
        : `${fmt(p.fallbackAfterKillMs, 1)} ms${timedOut ? ` (its command timed out after ${fmt(p.firstFallbackCallMs, 1)} ms)` : ''}`,
      verdict(p.fallbackAfterKillMs <= timeout + TARGETS.timerSlackMs),
    ]);
    out.push([
      `Outage, ${p.policy}: global decisions within ${fmtInt(TARGETS.recoveryMs)} ms of Redis' return`,
      Number.isNaN(p.globalAfterReadyMs) ? 'none after the restart' : `${fmt(p.globalAfterReadyMs, 1)} ms`,
      verdict(p.globalAfterReadyMs <= TARGETS.recoveryMs),
    ]);
    const withinBound = p.policy === 'closed' ? p.fallbackAdmitted === 0 : p.fallbackAdmitted <= p.fallbackBound;
    const slowOk = p.slowestOutageMs <= 2 * timeout;
    out.push([
      `Outage, ${p.policy}: no errors, fallback admissions within bound, no call > ${2 * timeout} ms`,
      `${fmtInt(p.errors)} errors; ${fmtInt(p.fallbackAdmitted)} admitted (bound ${fmtInt(p.fallbackBound)}); slowest ${fmt(p.slowestOutageMs, 1)} ms`,
      verdict(p.errors === 0 && withinBound && slowOk),
    ]);
  }
  out.push(['Outage: no crash (unhandled rejections in the process)', fmtInt(r.unhandled), verdict(r.unhandled === 0)]);
  return out;
}

function clusterRows(r: ClusterResult | undefined): Row[] {
  const target = 'Hot key on Redis Cluster: busiest master share of commands (no target)';
  if (r === undefined) return [[target, 'not run', '-']];
  const parts = r.cells.map((c) => {
    const total = c.nodes.reduce((a, n) => a + n.commands, 0);
    const busiest = Math.max(...c.nodes.map((n) => n.commands));
    const share = total > 0 ? `${((100 * busiest) / total).toFixed(0)}%` : 'n/a';
    return `${c.contender === 'rlf' ? 'RLF' : `split ${c.split}`} ${share}`;
  });
  return [[target, parts.join(', '), 'info']];
}

/** Everything measured in this run, by part; undefined parts were not run. */
export interface RunResults {
  readonly throughput?: readonly ThroughputRow[] | undefined;
  readonly leases?: readonly LeaseCellResult[] | undefined;
  readonly accuracy?: readonly AccuracyResult[] | undefined;
  readonly leaseAccuracy?: readonly AccuracyResult[] | undefined;
  readonly outage?: OutageResult | undefined;
  readonly cluster?: ClusterResult | undefined;
  readonly memory?: MemoryResult | undefined;
  readonly embedded?: EmbeddedResult | undefined;
  readonly servicePeers?: PeerResult | undefined;
}

/** Every SPEC target with the figure measured in this run. */
export function summaryTable(r: RunResults): Table {
  return {
    title: 'Summary: SPEC targets',
    header: ['target', 'measured', 'result'],
    align: ['left', 'left', 'left'],
    rows: [
      ...throughputRows(r.throughput),
      ...leaseRows(r.leases),
      ...accuracyRows(r.accuracy),
      ...leaseAccuracyRows(r.leaseAccuracy),
      ...outageRows(r.outage),
      ...memoryRows(r.memory),
      ...(r.embedded === undefined
        ? [['Embedded: Limiter.try >= 1x, rateLimit >= 0.5x RLF RateLimiterMemory', 'not run', '-'] as Row]
        : embeddedVerdicts(r.embedded)),
      ...clusterRows(r.cluster),
      ...servicePeersSummaryRows(r.servicePeers),
    ],
  };
}
