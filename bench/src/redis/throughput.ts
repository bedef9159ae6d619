import { createHistogram } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import type { Decider } from '../harness/contenders.js';
import { readRedisStats, redisCost, type RedisCost } from '../harness/redis-stats.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

/** How long each contender runs, unmeasured, before the first cell (JIT warm-up). */
const PRIME_MS = 1000;

/** What one closed loop measured. Latencies are in microseconds. */
export interface LoopResult {
  /** Decisions completed in the measured window. */
  readonly decisions: number;
  /** Decisions completed in the whole cell, warm-up included. */
  readonly completed: number;
  readonly allowed: number;
  readonly errors: number;
  readonly firstError: unknown;
  readonly perSec: number;
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
}

/** One cell: a closed loop and what it cost the client and Redis. */
export interface CellResult extends LoopResult {
  /** CPU time of this (client) process per decision over the whole cell, microseconds. */
  readonly clientUsecPerDecision: number;
  /** Redis-side work over the whole cell, when the server allows INFO. */
  readonly redis: RedisCost | undefined;
}

/**
 * Runs `inFlight` callers, each calling `decide` again as soon as its previous call settles, for
 * `warmupMs` unmeasured and then `measureMs` measured. Calls that complete inside the measured
 * window count, wherever they started. The loop reads the clock instead of using timers, so a
 * decider that never yields to the event loop still stops. A caller whose call failed pauses
 * 1 ms before the next.
 */
export async function closedLoop(
  decider: Decider,
  keyOf: (seq: number) => string,
  inFlight: number,
  warmupMs: number,
  measureMs: number,
): Promise<LoopResult> {
  const histogram = createHistogram({ lowest: 1, highest: 60_000_000_000, figures: 3 });
  const start = performance.now();
  const measureFrom = start + warmupMs;
  const end = measureFrom + measureMs;
  let seq = 0;
  let decisions = 0;
  let completed = 0;
  let allowed = 0;
  let errors = 0;
  let firstError: unknown;
  const caller = async (): Promise<void> => {
    for (;;) {
      const t0 = performance.now();
      if (t0 >= end) return;
      let ok: boolean;
      try {
        ok = await decider.decide(keyOf(seq++));
      } catch (err) {
        errors++;
        firstError ??= err;
        // A fault may be answered without I/O (e.g. a fallback decision while the store is
        // marked down): pause, or the callers would loop on microtasks alone and starve the
        // event loop, including the limiter's health probe that ends the fallback.
        await sleep(1);
        continue;
      }
      const t1 = performance.now();
      completed++;
      if (t1 >= measureFrom && t1 < end) {
        decisions++;
        if (ok) allowed++;
        histogram.record(Math.max(1, Math.round((t1 - t0) * 1e6)));
      }
    }
  };
  await Promise.all(Array.from({ length: inFlight }, caller));
  const us = (p: number) => (histogram.count === 0 ? NaN : histogram.percentile(p) / 1000);
  return {
    decisions,
    completed,
    allowed,
    errors,
    firstError,
    perSec: decisions / (measureMs / 1000),
    p50: us(50),
    p99: us(99),
    p999: us(99.9),
  };
}

/** The contenders of the throughput part, each serving many keys and one hot key. */
export interface ThroughputContenders {
  readonly sluice: Decider;
  readonly rlf: Decider;
  /** The minimal exact limiter of reference.ts: the yardstick. */
  readonly reference: Decider;
  /** A separate connection for reading the server's INFO around each cell. */
  readonly admin: Redis;
}

/** One comparison: the same load on both contenders. */
export interface ThroughputRow {
  readonly keys: 'many' | 'hot';
  readonly inFlight: number;
  readonly sluice: CellResult;
  readonly rlf: CellResult;
  readonly reference: CellResult;
}

export interface ThroughputSettings {
  readonly warmupMs: number;
  readonly measureMs: number;
  readonly inFlight: readonly number[];
  readonly hotInFlight: readonly number[];
  readonly keys: number;
}

/**
 * Runs every cell, alternating contenders so slow drift of the machine (thermal, noisy
 * neighbours) falls on both. Calls `between` after each cell (e.g. a GC).
 */
export async function runThroughput(
  contenders: ThroughputContenders,
  settings: ThroughputSettings,
  between: () => Promise<void>,
  progress: (line: string) => void,
): Promise<ThroughputRow[]> {
  const keys = Array.from({ length: settings.keys }, (_, i) => `user-${i}`);
  const many = (seq: number) => keys[seq % keys.length]!;
  const hot = () => 'hot';
  // Compiling each contender's code would otherwise fall on its first cell: run each a while first.
  for (const d of [contenders.sluice, contenders.reference, contenders.rlf]) await closedLoop(d, many, 16, PRIME_MS, 0);
  await between();
  const rows: ThroughputRow[] = [];
  for (const inFlight of settings.inFlight) {
    const variants: ('many' | 'hot')[] = settings.hotInFlight.includes(inFlight) ? ['many', 'hot'] : ['many'];
    for (const variant of variants) {
      const keyOf = variant === 'many' ? many : hot;
      const cell = async (d: Decider, name: string): Promise<CellResult> => {
        const before = await readRedisStats(contenders.admin);
        const started = performance.now();
        const cpu = process.cpuUsage();
        const r = await closedLoop(d, keyOf, inFlight, settings.warmupMs, settings.measureMs);
        const { user, system } = process.cpuUsage(cpu);
        const seconds = (performance.now() - started) / 1000;
        const redis = redisCost(before, await readRedisStats(contenders.admin), r.completed, seconds);
        const clientUsecPerDecision = r.completed === 0 ? NaN : (user + system) / r.completed;
        progress(`  ${name.padEnd(9)} ${variant.padEnd(4)} x${String(inFlight).padEnd(3)} ${fmtInt(r.perSec)}/s`);
        await between();
        return { ...r, clientUsecPerDecision, redis };
      };
      const sluice = await cell(contenders.sluice, 'sluice');
      const reference = await cell(contenders.reference, 'reference');
      const rlf = await cell(contenders.rlf, 'rlf');
      rows.push({ keys: variant, inFlight, sluice, rlf, reference });
    }
  }
  return rows;
}

function errorText(r: CellResult): string {
  if (r.errors === 0) return '0';
  const e = r.firstError;
  return `${fmtInt(r.errors)} (${e instanceof Error ? e.message : String(e)})`.slice(0, 60);
}

/** A row of Sluice's figures over another contender's. */
function ratioRow(name: string, sluice: CellResult, other: CellResult): string[] {
  return [
    `  ratio Sluice/${name}`,
    '',
    fmtRatio(sluice.perSec / other.perSec),
    '',
    fmtRatio(sluice.p50 / other.p50),
    fmtRatio(sluice.p99 / other.p99),
    fmtRatio(sluice.p999 / other.p999),
    fmtRatio(sluice.clientUsecPerDecision / other.clientUsecPerDecision),
    '',
    '',
    fmtRatio((sluice.redis?.usecPerDecision ?? NaN) / (other.redis?.usecPerDecision ?? NaN)),
    '',
    '',
  ];
}

/** The table of the throughput part. */
export function throughputTable(rows: readonly ThroughputRow[], settings: ThroughputSettings): Table {
  const out: string[][] = [];
  for (const row of rows) {
    for (const [name, r] of [
      ['Sluice', row.sluice],
      ['reference', row.reference],
      ['RLF', row.rlf],
    ] as const) {
      out.push([
        `${name} ${row.keys === 'many' ? 'many keys' : 'hot key'}`,
        String(row.inFlight),
        fmtInt(r.perSec),
        r.decisions === 0 ? 'n/a' : `${((100 * r.allowed) / r.decisions).toFixed(1)}%`,
        fmtInt(r.p50),
        fmtInt(r.p99),
        fmtInt(r.p999),
        fmt(r.clientUsecPerDecision, 1),
        r.redis === undefined ? 'n/a' : fmt(r.redis.scriptsPerDecision, 3),
        r.redis === undefined ? 'n/a' : fmt(r.redis.callsPerDecision, 2),
        r.redis === undefined ? 'n/a' : fmt(r.redis.usecPerDecision, 1),
        r.redis === undefined ? 'n/a' : `${fmt(r.redis.cpuPercent, 0)}%`,
        errorText(r),
      ]);
    }
    out.push(ratioRow('reference', row.sluice, row.reference), ratioRow('RLF', row.sluice, row.rlf));
  }
  return {
    title: 'Throughput and latency through Redis (closed loop)',
    header: [
      'contender',
      'in flight',
      'decisions/s',
      'allowed',
      'p50 us',
      'p99 us',
      'p99.9 us',
      'client CPU us/dec',
      'scripts/dec',
      'Redis cmds/dec',
      'Redis us/dec',
      'Redis CPU',
      'errors',
    ],
    rows: out,
    notes: [
      `Each cell: ${settings.warmupMs} ms warm-up, then ${settings.measureMs} ms measured; many keys cycle through ` +
        `${fmtInt(settings.keys)} keys, hot key is one key.`,
      'reference: the least an exact limiter on Redis does (bench/src/harness/reference.ts: GCRA, one number per key, every call',
      'of one event-loop turn in one script call); a yardstick for what this machine allows, not a product.',
      'Throughput ratio > 1 favours Sluice; latency ratio < 1 favours Sluice.',
      'Cost columns (whole cell, warm-up included): CPU time of the benchmark process per decision; from Redis INFO,',
      'script calls per decision (FCALL/EVALSHA/EVAL: the round trips that carry decisions), commands per decision (a script',
      "call and each command it runs count), microseconds Redis spent executing per decision, and the server's CPU use",
      '(100% = one core busy).',
    ],
  };
}

/**
 * Shared round trips, from the same cells: how many decisions one script call carried. Sluice
 * coalesces the calls of one tick into one script call per slot (and one key's items into one
 * read and write); RLF sends one script call per decision.
 */
export function coalescingTable(rows: readonly ThroughputRow[]): Table {
  const perCall = (r: CellResult) =>
    r.redis === undefined || r.redis.scriptsPerDecision === 0 ? NaN : 1 / r.redis.scriptsPerDecision;
  return {
    title: 'Shared round trips: decisions per script call (from the throughput cells)',
    header: [
      'keys',
      'in flight',
      'Sluice decisions/script call',
      'Sluice scripts/dec',
      'Sluice cmds/dec',
      'RLF decisions/script call',
      'RLF cmds/dec',
      'Sluice decisions/s',
      'RLF decisions/s',
    ],
    rows: rows.map((row) => [
      row.keys === 'many' ? 'many keys' : 'hot key',
      String(row.inFlight),
      fmt(perCall(row.sluice), 1),
      row.sluice.redis === undefined ? 'n/a' : fmt(row.sluice.redis.scriptsPerDecision, 3),
      row.sluice.redis === undefined ? 'n/a' : fmt(row.sluice.redis.callsPerDecision, 2),
      fmt(perCall(row.rlf), 1),
      row.rlf.redis === undefined ? 'n/a' : fmt(row.rlf.redis.callsPerDecision, 2),
      fmtInt(row.sluice.perSec),
      fmtInt(row.rlf.perSec),
    ]),
    notes: [
      'Script calls (FCALL/EVALSHA/EVAL) and commands counted by Redis (INFO commandstats) over each whole cell, divided by the',
      'decisions completed. Concurrent calls of one tick travel in one script call (per Cluster slot, at most',
      'maxBatchSize items); in it, the items of one key read and write',
      'that key once, so a hot key costs a fraction of a command per decision. RLF runs one script per decision.',
    ],
  };
}
