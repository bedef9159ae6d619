import { Limiter, type Decision, type TryOptions } from '@sluice/core';
import type { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { fallbackError } from '../harness/contenders.js';
import { CountingStore, type StoreCalls } from '../harness/recording-store.js';
import { readRedisStats, redisCost, type RedisCost } from '../harness/redis-stats.js';
import { createSluiceStore } from '../harness/sluice-store.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

/** A limit no cell reaches, so every call is admitted and every refill is granted in full. */
const HIGH = Object.freeze({ algorithm: 'token-bucket', limit: 50_000_000, burst: 50_000_000 } as const);

/**
 * How a caller asks for each decision: `trySync` first, awaiting `try` only when it returns
 * undefined (how docs/leases.md tells users to use leases), or `await try` for every decision (a
 * promise per decision, served from the lease inside `try` when it can be).
 */
export type LeaseLoop = 'trySync' | 'await';

/** One cell of the lease-throughput part. */
export interface LeaseCellSpec {
  /** The resource has `lease: true`; otherwise every decision is a plain `await try`. */
  readonly lease: boolean;
  readonly loop: LeaseLoop;
  /** Distinct keys cycled through. */
  readonly keys: number;
  /** Concurrent callers (async loops) in the process. */
  readonly callers: number;
}

export interface LeaseCellResult extends LeaseCellSpec {
  /** Decisions completed in the measured window. */
  readonly decisions: number;
  readonly perSec: number;
  readonly allowed: number;
  /** Share of the measured decisions answered by `trySync` without I/O. */
  readonly syncShare: number;
  /** Decisions completed in the whole cell, warm-up included. */
  readonly completed: number;
  /** Store calls over the whole cell (reserve = a lease refill; adjust = leftovers returned). */
  readonly calls: StoreCalls;
  readonly redis: RedisCost | undefined;
  /** CPU time of this process per decision over the whole cell, microseconds. */
  readonly clientUsecPerDecision: number;
  readonly errors: number;
  readonly firstError: unknown;
  /**
   * The same lease cell run again with the `await` loop, for comparison (on lease cells of the
   * `trySync` loop). Kept inside its cell so that the summary judges the `trySync` cells.
   */
  readonly awaitLoop?: LeaseCellResult;
}

export interface LeaseSettings {
  readonly redisUrl: string;
  readonly runId: string;
  readonly warmupMs: number;
  readonly measureMs: number;
  /** Keys of the "many keys" cells. */
  readonly manyKeys: number;
  /** Callers of the lease cells; the cells without leases run at the largest. */
  readonly callers: readonly number[];
}

/** Decisions made per clock read: reading `performance.now()` on every call would cost a tenth of one. */
const CHUNK_SYNC = 256;
const CHUNK_ASYNC = 8;

const yieldToEventLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Length of the key sequence the callers walk (a power of two). */
const ORDER_LENGTH = 1 << 16;
const ORDER_MASK = ORDER_LENGTH - 1;

/**
 * A fixed pseudo-random sequence of key indexes below `keys` (xorshift32, seeded, so every run
 * walks the same one). Walking the keys in one shared cyclic order would make callers queue: one
 * that waits for a refill is caught up by the others, which then wait on the same key, and soon
 * all move as one convoy, missing on every key together.
 */
function keyOrder(keys: number): Uint32Array {
  const order = new Uint32Array(ORDER_LENGTH);
  let x = 0x9e3779b9;
  for (let i = 0; i < ORDER_LENGTH; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    order[i] = (x >>> 0) % keys;
  }
  return order;
}

interface LoopCounts {
  decisions: number;
  completed: number;
  allowed: number;
  sync: number;
  errors: number;
  firstError: unknown;
}

/**
 * `callers` async loops, each deciding as fast as it can for `warmupMs + measureMs`: with the
 * `trySync` loop, `trySync` first (a leased permit, no I/O, no promise) and `await try` when it
 * cannot answer; with the `await` loop, `await try` every time. With the `trySync` loop a caller
 * only yields within a chunk when a lease must be refilled, like a request handler on the hot
 * path. With leases (either loop) it yields to the event loop between chunks (256 decisions), as
 * a server does between requests. The clock is read once per chunk of decisions; a chunk counts
 * when it ends inside the measured window.
 */
async function decideLoop(
  limiter: Limiter,
  resource: string,
  options: readonly TryOptions[],
  callers: number,
  spec: LeaseCellSpec,
  warmupMs: number,
  measureMs: number,
  storeFault: () => unknown,
): Promise<LoopCounts> {
  const start = performance.now();
  const measureFrom = start + warmupMs;
  const end = measureFrom + measureMs;
  const sync = spec.loop === 'trySync';
  const chunk = spec.lease ? CHUNK_SYNC : CHUNK_ASYNC;
  const counts: LoopCounts = { decisions: 0, completed: 0, allowed: 0, sync: 0, errors: 0, firstError: undefined };
  const caller = async (first: number): Promise<void> => {
    let i = first;
    let t = performance.now();
    while (t < end) {
      let n = 0;
      let admitted = 0;
      let local = 0;
      for (let j = 0; j < chunk; j++) {
        const o = options[order[i]!]!;
        i = (i + 1) & ORDER_MASK;
        let d: Decision | undefined = sync ? limiter.trySync(resource, o) : undefined;
        if (d !== undefined) {
          local++;
        } else {
          try {
            d = await limiter.try(resource, o);
          } catch (err) {
            counts.errors++;
            counts.firstError ??= err;
            await sleep(1);
            continue;
          }
        }
        if (d.source === 'fallback') {
          // Answered locally while the store is marked down: pause so the limiter's health
          // probe gets the event loop (the callers would otherwise spin on microtasks alone).
          counts.errors++;
          counts.firstError ??= fallbackError(storeFault());
          await sleep(1);
          continue;
        }
        n++;
        if (d.allowed) admitted++;
      }
      // Between chunks the caller yields to the event loop, as a server does between requests:
      // a lease refill taken ahead lands meanwhile instead of when the lease has run out.
      if (spec.lease) await yieldToEventLoop();
      t = performance.now();
      counts.completed += n;
      if (t >= measureFrom && t < end) {
        counts.decisions += n;
        counts.allowed += admitted;
        counts.sync += local;
      }
    }
  };
  // Each caller starts at its own point of the sequence.
  const order = keyOrder(options.length);
  await Promise.all(Array.from({ length: callers }, (_, c) => caller(Math.floor((c * ORDER_LENGTH) / callers))));
  return counts;
}

/** Runs one cell on its own limiter and store (so lease state never carries over). */
async function runCell(spec: LeaseCellSpec, s: LeaseSettings, admin: Redis, n: number): Promise<LeaseCellResult> {
  const resource = `bench:${s.runId}:lease${n}`;
  const counting = new CountingStore(await createSluiceStore(s.redisUrl));
  let cause: unknown;
  const limiter = new Limiter({
    store: counting,
    resources: { [resource]: spec.lease ? { limits: HIGH, lease: true } : HIGH },
    failover: { onSwitch: (e) => (cause = e.healthy ? cause : e.error) },
  });
  const options = Array.from({ length: spec.keys }, (_, i) => Object.freeze({ key: spec.keys === 1 ? 'hot' : `user-${i}` }));
  try {
    const before = await readRedisStats(admin);
    const started = performance.now();
    const cpu = process.cpuUsage();
    const r = await decideLoop(limiter, resource, options, spec.callers, spec, s.warmupMs, s.measureMs, () => cause);
    const { user, system } = process.cpuUsage(cpu);
    const seconds = (performance.now() - started) / 1000;
    const redis = redisCost(before, await readRedisStats(admin), r.completed, seconds);
    return {
      ...spec,
      decisions: r.decisions,
      perSec: r.decisions / (s.measureMs / 1000),
      allowed: r.allowed,
      syncShare: r.decisions === 0 ? NaN : r.sync / r.decisions,
      completed: r.completed,
      calls: { ...counting.calls },
      redis,
      clientUsecPerDecision: r.completed === 0 ? NaN : (user + system) / r.completed,
      errors: r.errors,
      firstError: r.firstError,
    };
  } finally {
    await limiter.close();
    await counting.close();
  }
}

/**
 * The cells of the part: for one key and for many, leases with the `trySync` loop at each caller
 * count (each also run with the `await` loop), then plain `try` at the largest (at one caller it
 * is the 1-in-flight latency, which the throughput part shows).
 */
export function leaseCells(s: LeaseSettings): LeaseCellSpec[] {
  const most = Math.max(...s.callers);
  return [1, s.manyKeys].flatMap((keys) => [
    ...s.callers.map((callers): LeaseCellSpec => ({ lease: true, loop: 'trySync', keys, callers })),
    { lease: false, loop: 'await', keys, callers: most },
  ]);
}

function modeLabel(spec: LeaseCellSpec): string {
  return spec.lease ? `lease: true, ${spec.loop} loop` : 'no lease, await loop';
}

/** Runs every cell (lease cells with each loop); `between` runs after each (e.g. a GC). */
export async function runLeaseThroughput(
  s: LeaseSettings,
  admin: Redis,
  between: () => Promise<void>,
  progress: (line: string) => void,
): Promise<LeaseCellResult[]> {
  const results: LeaseCellResult[] = [];
  let n = 0;
  const run = async (spec: LeaseCellSpec): Promise<LeaseCellResult> => {
    const r = await runCell(spec, s, admin, n++);
    progress(`  ${modeLabel(spec).padEnd(28)} ${String(spec.keys).padStart(5)} key(s) x${spec.callers} ${fmtInt(r.perSec)}/s`);
    await between();
    return r;
  };
  for (const spec of leaseCells(s)) {
    const r = await run(spec);
    results.push(spec.lease ? { ...r, awaitLoop: await run({ ...spec, loop: 'await' }) } : r);
  }
  return results;
}

function perDecision(count: number, r: LeaseCellResult): string {
  if (r.completed === 0) return 'n/a';
  const x = count / r.completed;
  return x === 0 ? '0' : x >= 0.01 ? fmt(x, 3) : x.toExponential(1);
}

/** The table of the lease-throughput part. */
export function leaseTable(results: readonly LeaseCellResult[], s: LeaseSettings): Table {
  const cells = results.flatMap((r) => (r.awaitLoop === undefined ? [r] : [r, r.awaitLoop]));
  const rows: string[][] = cells.map((r) => [
    modeLabel(r),
    r.keys === 1 ? '1 (hot)' : fmtInt(r.keys),
    String(r.callers),
    fmtInt(r.perSec),
    r.decisions === 0 ? 'n/a' : `${((100 * r.allowed) / r.decisions).toFixed(1)}%`,
    r.loop !== 'trySync' ? '-' : Number.isNaN(r.syncShare) ? 'n/a' : `${(100 * r.syncShare).toFixed(2)}%`,
    perDecision(r.calls.reserve, r),
    r.calls.reserve === 0 ? '-' : fmt(r.calls.granted / r.calls.reserve, 0),
    perDecision(r.calls.adjust, r),
    r.redis === undefined ? 'n/a' : perDecision(r.redis.scriptsPerDecision * r.completed, r),
    fmt(r.clientUsecPerDecision, 3),
    r.errors === 0
      ? '0'
      : `${fmtInt(r.errors)} (${r.firstError instanceof Error ? r.firstError.message : String(r.firstError)})`.slice(0, 60),
  ]);
  const ratio = (label: string, r: LeaseCellSpec, x: number): string[] => [
    `  ratio ${label}`,
    r.keys === 1 ? '1 (hot)' : fmtInt(r.keys),
    String(r.callers),
    fmtRatio(x),
    ...Array.from({ length: 8 }, () => ''),
  ];
  for (const r of results) {
    if (r.awaitLoop !== undefined) rows.push(ratio('trySync/await loop', r, r.perSec / r.awaitLoop.perSec));
  }
  for (const plain of results.filter((r) => !r.lease)) {
    const lease = results.find((r) => r.lease && r.keys === plain.keys && r.callers === plain.callers);
    if (lease) rows.push(ratio('lease, trySync/no lease', plain, lease.perSec / plain.perSec));
  }
  return {
    title: 'Lease throughput: one process, decisions per second through Redis',
    header: [
      'mode',
      'keys',
      'callers',
      'decisions/s',
      'allowed',
      'by trySync',
      'refills/dec',
      'permits/refill',
      'returns/dec',
      'round trips/dec',
      'client CPU us/dec',
      'errors',
    ],
    rows,
    notes: [
      `Each cell: ${s.warmupMs} ms warm-up, then ${s.measureMs} ms measured, on its own Limiter and RedisStore; one token-bucket`,
      'limit of 50M/s (burst 50M), so every call is admitted. N async callers loop as fast as they can over the keys,',
      'yielding to the event loop every 256 decisions with a lease. trySync loop: `limiter.trySync()` (served from',
      'leased permits: no I/O, no promise) and, only when it returns undefined, `await limiter.try()` (refills the',
      'lease; concurrent refills of a key share one reservation). await loop: `await limiter.try()` for every decision',
      '(served from the lease inside try: no I/O, but a promise per decision). No lease: `await try`, a round trip each.',
      '"by trySync" is the share answered synchronously (the others awaited a refill, their own or a shared one). Per',
      'decision over the whole cell: refills = reserve calls to the store, returns = leftover refunds (adjust), round',
      'trips = script calls counted by Redis (INFO commandstats; calls of one tick share one). permits/refill = permits',
      "granted per reserve call (the batch: about 50 ms of the key's local demand, or four refill round trips of it when",
      'those are longer, at most half the TTL; at most 10,000). The summary judges the trySync loop cells.',
      `Keys of the ${fmtInt(s.manyKeys)}-key cells come in a fixed pseudo-random order, each caller starting at its own point. Each`,
      'key sees a thousandth of the demand, so its batches are small and every key takes its own refill about every',
      '50 ms. Batches taken ahead wait up to 1 ms for those of other keys and share a script call; a refill a caller',
      'waits for goes at once (with one caller, in sequence; with 64, the refills of one tick share a call).',
    ],
  };
}
