import { fileURLToPath } from 'node:url';
import { wallNow, type AccuracySpec, type FromWorker, type ToWorker } from './accuracy-protocol.js';
import { ForkedWorker } from '../harness/forked.js';
import { fmt, fmtInt, type Table } from '../report/table.js';
import { countBetween, maxInWindow, mergeTimestamps } from './windows.js';

/** One accuracy run: a contender, its stated bound, and what the merged timestamps showed. */
export interface AccuracyResult {
  readonly label: string;
  /** True for Sluice's algorithms, which the SPEC targets apply to. */
  readonly targeted: boolean;
  readonly limit: number;
  readonly burst: number;
  readonly durationMs: number;
  readonly demandPerSec: number;
  readonly admitted: number;
  /**
   * Admitted per second after the first second (the initial burst excluded), by the deciding
   * clock when the contender reports it, else by arrival.
   */
  readonly steadyPerSec: number;
  /** Busiest windows by the time each admitted decision arrived in its caller. */
  readonly max1s: number;
  readonly max100ms: number;
  /** Busiest windows by the store's clock at each admission (Redis TIME); Sluice only. */
  readonly decidedMax1s: number | undefined;
  readonly decidedMax100ms: number | undefined;
  /** Most a correct limiter admits in any 1 s window (with leases: the documented lease bound). */
  readonly bound1s: number;
  /** Most a correct limiter admits in any 100 ms window (with leases: the documented lease bound). */
  readonly bound100ms: number;
  readonly errors: number;
  readonly firstError: string | undefined;
  /** All decisions, those of the local fallback and switches to it (fallbacks: runs with `defaults`). */
  readonly decisions: number;
  readonly fallbacks?: number;
  readonly switches?: number;
}

export interface AccuracySettings {
  readonly redisUrl: string;
  readonly runId: string;
  readonly processes: number;
  readonly inFlight: number;
  readonly limit: number;
  readonly burst: number;
  readonly durationMs: number;
}

/** One contender of an accuracy part and the bounds it is held to. */
export interface AccuracyRun {
  readonly label: string;
  readonly spec: AccuracySpec;
  readonly burst: number;
  readonly bound1s: number;
  readonly bound100ms: number;
}

/** The default lease TTL (`lease: true`), docs/leases.md. */
export const DEFAULT_LEASE_TTL_MS = 200;

/** The accuracy part's runs: Sluice's algorithms and RLF, without leases. */
export function accuracyRuns(s: AccuracySettings): AccuracyRun[] {
  const bucket = (algorithm: 'token-bucket' | 'gcra', label: string): AccuracyRun => ({
    label,
    spec: { contender: 'sluice', algorithm, resource: `bench:${s.runId}:acc:${algorithm}`, limit: s.limit, burst: s.burst },
    burst: s.burst,
    bound1s: s.limit + s.burst,
    bound100ms: s.burst + s.limit / 10,
  });
  return [
    bucket('token-bucket', 'Sluice token bucket'),
    bucket('gcra', 'Sluice GCRA'),
    {
      label: 'Sluice sliding window (10 slices)',
      spec: {
        contender: 'sluice',
        algorithm: 'sliding-window',
        resource: `bench:${s.runId}:acc:sliding-window`,
        limit: s.limit,
        burst: 0,
      },
      burst: 0,
      bound1s: s.limit,
      bound100ms: s.limit,
    },
    {
      label: 'RLF RateLimiterRedis (fixed window)',
      spec: { contender: 'rlf', keyPrefix: `rlf:${s.runId}:acc`, limit: s.limit },
      burst: 0,
      bound1s: s.limit,
      bound100ms: s.limit,
    },
  ];
}

/**
 * The lease-accuracy part's runs: the token bucket and the sliding window with `lease: true`.
 * Leased permits are taken from the global budget but used up to `ttlMs` later, so the documented
 * bound (docs/leases.md) of a token bucket for a window of W is `burst + limit * (W + ttlMs) / 1 s`;
 * a sliding window counts a batch as taken when its TTL ends, so its bound stays the limit.
 */
export function leaseAccuracyRuns(s: AccuracySettings): AccuracyRun[] {
  const ttl = DEFAULT_LEASE_TTL_MS;
  return [
    {
      label: 'Sluice sliding window, lease: true',
      spec: {
        contender: 'sluice',
        algorithm: 'sliding-window',
        resource: `bench:${s.runId}:lacc:sliding-window`,
        limit: s.limit,
        burst: 0,
        lease: true,
      },
      burst: 0,
      bound1s: s.limit,
      bound100ms: s.limit,
    },
    {
      label: 'Sluice token bucket, lease: true',
      spec: {
        contender: 'sluice',
        algorithm: 'token-bucket',
        resource: `bench:${s.runId}:lacc:token-bucket`,
        limit: s.limit,
        burst: s.burst,
        lease: true,
      },
      burst: s.burst,
      bound1s: s.burst + (s.limit * (1000 + ttl)) / 1000,
      bound100ms: s.burst + (s.limit * (100 + ttl)) / 1000,
    },
  ];
}

/**
 * Forks `processes` workers and, for each contender in turn, has them share one limit under
 * excess demand; merges the wall-clock times of admitted calls and measures the busiest windows.
 */
export async function runAccuracy(
  settings: AccuracySettings,
  runs: readonly AccuracyRun[],
  progress: (line: string) => void,
): Promise<AccuracyResult[]> {
  const script = fileURLToPath(new URL('./accuracy-worker.js', import.meta.url));
  const workers = Array.from(
    { length: settings.processes },
    () => new ForkedWorker<ToWorker, FromWorker>('accuracy worker', script),
  );
  try {
    const results: AccuracyResult[] = [];
    for (const run of runs) {
      for (const w of workers)
        w.send({ type: 'prepare', redisUrl: settings.redisUrl, spec: run.spec, inFlight: settings.inFlight });
      for (const w of workers) await w.next();
      // Far enough ahead that every worker has the message before the start.
      const startAt = wallNow() + 250;
      const end = startAt + settings.durationMs;
      for (const w of workers) w.send({ type: 'go', startAt, durationMs: settings.durationMs });
      const replies = [];
      for (const w of workers) replies.push(await w.expect('result'));
      const times = mergeTimestamps(
        replies.map((r) => r.admitted),
        startAt,
        end,
      );
      const decidedLists = replies.map((r) => r.decided);
      const decided = decidedLists.every((d) => d !== undefined) ? mergeTimestamps(decidedLists, startAt, end) : undefined;
      const steadyMs = settings.durationMs - 1000;
      const result: AccuracyResult = {
        label: run.label,
        targeted: run.spec.contender === 'sluice',
        limit: settings.limit,
        burst: run.burst,
        durationMs: settings.durationMs,
        demandPerSec: replies.reduce((n, r) => n + r.decisions, 0) / (settings.durationMs / 1000),
        admitted: times.length,
        steadyPerSec: countBetween(decided ?? times, startAt + 1000, end) / (steadyMs / 1000),
        max1s: maxInWindow(times, 1000),
        max100ms: maxInWindow(times, 100),
        decidedMax1s: decided === undefined ? undefined : maxInWindow(decided, 1000),
        decidedMax100ms: decided === undefined ? undefined : maxInWindow(decided, 100),
        bound1s: run.bound1s,
        bound100ms: run.bound100ms,
        errors: replies.reduce((n, r) => n + r.errors, 0),
        firstError: replies.find((r) => r.firstError !== undefined)?.firstError,
        decisions: replies.reduce((n, r) => n + r.decisions, 0),
        ...(run.spec.contender === 'sluice' && run.spec.defaults !== undefined
          ? {
              fallbacks: replies.reduce((n, r) => n + (r.fallbacks ?? 0), 0),
              switches: replies.reduce((n, r) => n + (r.switches ?? 0), 0),
            }
          : {}),
      };
      progress(
        `  ${run.label}: ${fmtInt(result.steadyPerSec)}/s admitted, busiest 1 s ${fmtInt(result.decidedMax1s ?? result.max1s)}`,
      );
      results.push(result);
    }
    return results;
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
}

/** The table of the accuracy part. */
export function accuracyTable(results: readonly AccuracyResult[], settings: AccuracySettings): Table {
  return {
    title: `Accuracy: ${settings.processes} processes sharing one limit of ${fmtInt(settings.limit)}/s through Redis`,
    header: [
      'limiter',
      'burst',
      'demand/s',
      'admitted/s',
      'of limit',
      '1 s decided',
      '1 s arrived',
      '1 s bound',
      '100 ms decided',
      '100 ms arrived',
      '100 ms bound',
      'errors',
    ],
    rows: results.map((r) => [
      r.label,
      String(r.burst),
      fmtInt(r.demandPerSec),
      fmtInt(r.steadyPerSec),
      fmt(r.steadyPerSec / r.limit, 3),
      r.decidedMax1s === undefined ? 'n/a' : fmtInt(r.decidedMax1s),
      fmtInt(r.max1s),
      fmtInt(r.bound1s),
      r.decidedMax100ms === undefined ? 'n/a' : fmtInt(r.decidedMax100ms),
      fmtInt(r.max100ms),
      fmtInt(r.bound100ms),
      r.errors === 0 ? '0' : `${fmtInt(r.errors)} (${r.firstError ?? ''})`.slice(0, 60),
    ]),
    notes: [
      `Each run: ${settings.durationMs / 1000} s, every process keeps ${settings.inFlight} calls in flight on one shared key ` +
        '(demand/s is all decisions, admitted or not).',
      'admitted/s is measured after the first second (the initial burst excluded), on the deciding clock where known;',
      '"of limit" divides it by the limit.',
      'The 1 s and 100 ms columns give the most admissions in any sliding window of that length over the merged times of',
      'all processes: "decided" on the clock that decided (Redis TIME, reported by the Sluice store; RLF does not report',
      'it), "arrived" on the callers\' wall clocks when the decision reached them (adds client queueing jitter).',
      'Bound: limit + burst per 1 s for token bucket and GCRA (burst + limit/10 per 100 ms); the limit for the window',
      'algorithms, which have no burst. The summary judges Sluice on the "decided" column.',
    ],
  };
}

/** The table of the lease-accuracy part: windows by arrival, against the lease bound and limit + burst. */
export function leaseAccuracyTable(results: readonly AccuracyResult[], settings: AccuracySettings): Table {
  return {
    title: `Accuracy with leases: ${settings.processes} processes sharing one limit of ${fmtInt(settings.limit)}/s through Redis`,
    header: [
      'limiter',
      'burst',
      'demand/s',
      'admitted/s',
      'of limit',
      'max 1 s',
      '1 s lease bound',
      '1 s limit + burst',
      'max 100 ms',
      '100 ms lease bound',
      '100 ms burst + limit/10',
      'admitted total',
      'errors',
    ],
    rows: results.map((r) => [
      r.label,
      String(r.burst),
      fmtInt(r.demandPerSec),
      fmtInt(r.steadyPerSec),
      fmt(r.steadyPerSec / r.limit, 3),
      fmtInt(r.max1s),
      fmtInt(r.bound1s),
      fmtInt(r.limit + r.burst),
      fmtInt(r.max100ms),
      fmtInt(r.bound100ms),
      fmtInt(r.burst + r.limit / 10),
      `${fmtInt(r.admitted)} of ${fmtInt(r.burst + (r.limit * r.durationMs) / 1000)}`,
      r.errors === 0 ? '0' : `${fmtInt(r.errors)} (${r.firstError ?? ''})`.slice(0, 60),
    ]),
    notes: [
      `Each run: ${settings.durationMs / 1000} s, every process keeps ${settings.inFlight} calls in flight on one shared key, each call`,
      '`trySync` (served from the lease without I/O) or, when that cannot answer, `await try` (a refill: one reservation',
      'of a batch of permits, shared by concurrent callers). admitted/s is measured after the first second.',
      'Windows are by arrival (when each admitted decision reached its caller, merged over all processes): a leased permit',
      "is granted by Redis when the batch is reserved but used later, so Redis' clock does not say when it was used.",
      `Lease bound (docs/leases.md, ttlMs ${DEFAULT_LEASE_TTL_MS}): burst + limit * (W + ttlMs) / 1 s for a window W of a token bucket;`,
      'the limit itself for a sliding window, which counts a batch as taken when its TTL ends. "admitted total" is every',
      'admission of the run against burst + limit * duration, the most the algorithm can grant in that time.',
    ],
  };
}
