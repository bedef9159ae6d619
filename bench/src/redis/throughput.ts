import { createHistogram } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { rlfDecider, sluiceDecider, type Decider } from '../harness/contenders.js';
import { ForkedWorker } from '../harness/forked.js';
import { addGrowth, readRedisStats, redisCost, ZERO_STATS, type RedisCost, type RedisStats } from '../harness/redis-stats.js';
import { referenceDecider } from '../harness/reference.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

/** How long each contender runs, unmeasured, at 1 and at 16 calls in flight, before the first cell (JIT warm-up). */
export const PRIME_MS = 1000;

/** Every contender's limit per second (and burst): never reached, every call is admitted and charged. */
export const THROUGHPUT_LIMIT = 1_000_000_000;

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
 * What a closed loop has measured so far. A cell run in slices (see {@link runThroughput}) adds
 * each slice into the same tally: one histogram of latencies, one count, and the keys taken up
 * where the last slice left them.
 */
export class LoopTally {
  readonly histogram = createHistogram({ lowest: 1, highest: 60_000_000_000, figures: 3 });
  /** The next call's sequence number (which key it takes). */
  seq = 0;
  decisions = 0;
  completed = 0;
  allowed = 0;
  errors = 0;
  firstError: unknown;
  measuredMs = 0;

  result(): LoopResult {
    const h = this.histogram;
    const us = (p: number) => (h.count === 0 ? NaN : h.percentile(p) / 1000);
    return {
      decisions: this.decisions,
      completed: this.completed,
      allowed: this.allowed,
      errors: this.errors,
      firstError: this.firstError,
      perSec: this.decisions / (this.measuredMs / 1000),
      p50: us(50),
      p99: us(99),
      p999: us(99.9),
    };
  }
}

/**
 * Runs `inFlight` callers, each calling `decide` again as soon as its previous call settles, for
 * `warmupMs` unmeasured and then `measureMs` measured. Calls that complete inside the measured
 * window count, wherever they started. The loop reads the clock instead of using timers, so a
 * decider that never yields to the event loop still stops. A caller whose call failed pauses
 * 1 ms before the next. Adds into `tally` and answers what it holds then.
 */
export async function closedLoop(
  decider: Decider,
  keyOf: (seq: number) => string,
  inFlight: number,
  warmupMs: number,
  measureMs: number,
  tally = new LoopTally(),
): Promise<LoopResult> {
  const start = performance.now();
  const measureFrom = start + warmupMs;
  const end = measureFrom + measureMs;
  const caller = async (): Promise<void> => {
    for (;;) {
      const t0 = performance.now();
      if (t0 >= end) return;
      let ok: boolean;
      try {
        ok = await decider.decide(keyOf(tally.seq++));
      } catch (err) {
        tally.errors++;
        tally.firstError ??= err;
        // A fault may be answered without I/O (e.g. a fallback decision while the store is
        // marked down): pause, or the callers would loop on microtasks alone and starve the
        // event loop, including the limiter's health probe that ends the fallback.
        await sleep(1);
        continue;
      }
      const t1 = performance.now();
      tally.completed++;
      if (t1 >= measureFrom && t1 < end) {
        tally.decisions++;
        if (ok) tally.allowed++;
        tally.histogram.record(Math.max(1, Math.round((t1 - t0) * 1e6)));
      }
    }
  };
  await Promise.all(Array.from({ length: inFlight }, caller));
  tally.measuredMs += measureMs;
  return tally.result();
}

/** {@link closedLoop} over `keys` in turn, with this process' CPU time over it, in µs. */
export async function cycledLoop(
  decider: Decider,
  keys: readonly string[],
  inFlight: number,
  warmupMs: number,
  measureMs: number,
  tally?: LoopTally,
): Promise<{ loop: LoopResult; cpuUs: number }> {
  const cpu = process.cpuUsage();
  const loop = await closedLoop(decider, (seq) => keys[seq % keys.length]!, inFlight, warmupMs, measureMs, tally);
  const { user, system } = process.cpuUsage(cpu);
  return { loop, cpuUs: user + system };
}

export type ThroughputContender = 'sluice' | 'reference' | 'rlf';

/** Sluice's policy in the throughput part: a token bucket that is never exhausted. */
export const THROUGHPUT_POLICY = Object.freeze({
  algorithm: 'token-bucket',
  limit: THROUGHPUT_LIMIT,
  burst: THROUGHPUT_LIMIT,
} as const);

/**
 * A contender as the throughput part sets it up, under keys of run `runId` only: Sluice's
 * `try` (one token bucket), the reference or RLF, each with THROUGHPUT_LIMIT.
 */
export function throughputDecider(name: ThroughputContender, redisUrl: string, runId: string): Promise<Decider> {
  const limit = THROUGHPUT_LIMIT;
  switch (name) {
    case 'sluice':
      return sluiceDecider(redisUrl, `bench:${runId}:tp`, THROUGHPUT_POLICY);
    case 'reference':
      return referenceDecider(redisUrl, `ref:${runId}:tp:`, limit, 1000, limit);
    case 'rlf':
      return rlfDecider(redisUrl, `rlf:${runId}:tp`, limit, 1);
    default:
      throw new Error(`unknown contender ${String(name)}: sluice | reference | rlf`);
  }
}

/** Messages to a contender's process (throughput-worker.ts). */
export type ToContender =
  /**
   * Run a slice of a cell on `keys` keys (1: the hot key); answered by `result`, the cell's
   * figures so far. `first`: the cell's first slice (its tally starts afresh); a later slice adds
   * to the tally of the one before.
   */
  | {
      readonly type: 'cell';
      readonly keys: number;
      readonly inFlight: number;
      readonly warmupMs: number;
      readonly measureMs: number;
      readonly first: boolean;
    }
  /** Collect garbage and rest a moment; answered by `settled`. */
  | { readonly type: 'settle' }
  | { readonly type: 'quit' };

export type FromContender =
  | { readonly type: 'ready' }
  /** `cpuUs`: the process' CPU time over the slice (warm-up included). */
  | { readonly type: 'result'; readonly loop: LoopResult; readonly cpuUs: number }
  | { readonly type: 'settled' }
  | { readonly type: 'failed'; readonly error: string };

/**
 * A contender of the throughput part in a Node process of its own, as an app calling one
 * limiter: in one shared process each contender's optimized code (ioredis' above all) also
 * serves the others' calls, and each collects the others' garbage.
 */
export class ContenderProcess {
  readonly #worker: ForkedWorker<ToContender, FromContender>;

  private constructor(worker: ForkedWorker<ToContender, FromContender>) {
    this.#worker = worker;
  }

  /** Starts the process and waits until it has run its contender a while (PRIME_MS). */
  static async start(name: ThroughputContender, redisUrl: string, runId: string, keys: number): Promise<ContenderProcess> {
    const script = fileURLToPath(new URL('./throughput-worker.js', import.meta.url));
    const worker = new ForkedWorker<ToContender, FromContender>(
      `throughput contender ${name}`,
      script,
      [name, redisUrl, runId, String(keys)],
      ['--expose-gc'],
    );
    try {
      await worker.expect('ready');
    } catch (error) {
      await worker.stop();
      throw error;
    }
    return new ContenderProcess(worker);
  }

  async slice(
    keys: number,
    inFlight: number,
    warmupMs: number,
    measureMs: number,
    first: boolean,
  ): Promise<{ loop: LoopResult; cpuUs: number }> {
    this.#worker.send({ type: 'cell', keys, inFlight, warmupMs, measureMs, first });
    return this.#worker.expect('result');
  }

  async settle(): Promise<void> {
    this.#worker.send({ type: 'settle' });
    await this.#worker.expect('settled');
  }

  close(): Promise<void> {
    return this.#worker.stop();
  }
}

/** The contenders of the throughput part, each serving many keys and one hot key. */
export interface ThroughputContenders {
  readonly sluice: ContenderProcess;
  readonly rlf: ContenderProcess;
  /** The minimal exact limiter of reference.ts: the yardstick. */
  readonly reference: ContenderProcess;
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

/** Slices each cell's measured time is split into, the contenders taking turns slice by slice. */
export const CELL_SLICES = 5;

/** Unmeasured time before each slice but a cell's first (which has the cell's warm-up). */
export const SLICE_WARMUP_MS = 100;

/**
 * Runs every cell. A cell's measured time is cut into CELL_SLICES slices and the contenders take
 * turns slice by slice, the order turning each slice, so a disturbance of the machine (a noisy
 * neighbour, a stall of the host) falls on all three alike instead of on whichever contender had
 * the cell then: a p99 at one call in flight is the slowest 1% of some 15,000 calls, and one stall
 * of a few milliseconds moves it. Each contender collects its garbage and rests after each cell.
 */
export async function runThroughput(
  contenders: ThroughputContenders,
  settings: ThroughputSettings,
  progress: (line: string) => void,
): Promise<ThroughputRow[]> {
  const rows: ThroughputRow[] = [];
  const order = [
    ['sluice', contenders.sluice],
    ['reference', contenders.reference],
    ['rlf', contenders.rlf],
  ] as const;
  for (const inFlight of settings.inFlight) {
    const variants: ('many' | 'hot')[] = settings.hotInFlight.includes(inFlight) ? ['many', 'hot'] : ['many'];
    for (const variant of variants) {
      const keys = variant === 'many' ? settings.keys : 1;
      /** Each contender's CPU time, time and Redis work over its slices so far. */
      const spent = new Map<string, { cpuUs: number; seconds: number; redis: RedisStats | undefined }>(
        order.map(([name]) => [name, { cpuUs: 0, seconds: 0, redis: ZERO_STATS }]),
      );
      const last = new Map<string, LoopResult>();
      // Nothing runs between two slices: the counters read after one are those before the next.
      let counters = await readRedisStats(contenders.admin);
      for (let s = 0; s < CELL_SLICES; s++) {
        for (let i = 0; i < order.length; i++) {
          const [name, d] = order[(i + s) % order.length]!;
          const sum = spent.get(name)!;
          const started = performance.now();
          const warmupMs = s === 0 ? settings.warmupMs : SLICE_WARMUP_MS;
          const { loop, cpuUs } = await d.slice(keys, inFlight, warmupMs, settings.measureMs / CELL_SLICES, s === 0);
          sum.seconds += (performance.now() - started) / 1000;
          const after = await readRedisStats(contenders.admin);
          sum.redis = addGrowth(sum.redis, counters, after);
          counters = after;
          sum.cpuUs += cpuUs;
          last.set(name, loop);
        }
      }
      // After the cell, not between its slices: a forced collection leaves the collector's
      // threads sweeping for a while after it, beside the next slice.
      for (const [, d] of order) await d.settle();
      const result = (name: ThroughputContender): CellResult => {
        const r = last.get(name)!;
        const sum = spent.get(name)!;
        progress(`  ${name.padEnd(9)} ${variant.padEnd(4)} x${String(inFlight).padEnd(3)} ${fmtInt(r.perSec)}/s`);
        return {
          ...r,
          clientUsecPerDecision: r.completed === 0 ? NaN : sum.cpuUs / r.completed,
          redis: redisCost(ZERO_STATS, sum.redis, r.completed, sum.seconds),
        };
      };
      rows.push({ keys: variant, inFlight, sluice: result('sluice'), reference: result('reference'), rlf: result('rlf') });
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
      `Each cell: ${fmtInt(settings.measureMs)} ms measured in ${CELL_SLICES} slices, the contenders taking turns slice by slice ` +
        `(${fmtInt(settings.warmupMs)} ms unmeasured before the first, ${SLICE_WARMUP_MS} ms before each other);`,
      `many keys cycle through ${fmtInt(settings.keys)} keys, hot key is one key.`,
      'reference: the least an exact limiter on Redis does (bench/src/harness/reference.ts: GCRA, one number per key, every call',
      'of one event-loop turn in one script call); a yardstick for what this machine allows, not a product.',
      'Throughput ratio > 1 favours Sluice; latency ratio < 1 favours Sluice.',
      'Each contender runs in a Node process of its own (as an app calling one limiter); before',
      `its first cell it runs ${fmtInt(PRIME_MS)} ms at 1 and ${fmtInt(PRIME_MS)} ms at 16 calls in flight, unmeasured (JIT warm-up).`,
      "Cost columns (whole cell, warm-up included): CPU time of the contender's process per decision; from Redis INFO,",
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
      'decisions completed. Concurrent calls of one tick share script calls (per Cluster slot, at most maxBatchSize',
      'items; two, four on a hot key, taking turns when none is in flight and the tick holds 16 calls or more); in',
      'a call, the items of one key read and write that key once, so a hot key costs a fraction of a command per',
      'decision. RLF runs one script per decision.',
    ],
  };
}
