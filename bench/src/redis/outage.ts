import { Limiter, type StoreFailurePolicy } from '@sluice/core';
import type { RedisStore } from '@sluice/redis';
import { setTimeout as sleep } from 'node:timers/promises';
import { startThrowawayRedis } from '../harness/redis-server.js';
import { createSluiceStore } from '../harness/sluice-store.js';
import { fmt, fmtInt, type Table } from '../report/table.js';

export const POLICIES: readonly StoreFailurePolicy[] = ['local', 'open', 'closed'];

export interface OutageSettings {
  readonly runId: string;
  /** The resource's fixed-window limit per second. */
  readonly limit: number;
  /** Live clients the fallback divides the limit by (`failover.peers`). */
  readonly peers: number;
  /** The Redis store's `commandTimeoutMs`. */
  readonly commandTimeoutMs: number;
  /** Callers per policy; each calls again `pauseMs` after its previous call settled. */
  readonly callers: number;
  readonly pauseMs: number;
  /** Load before the kill, ms. */
  readonly beforeKillMs: number;
  /** From the kill to the restart, ms. */
  readonly downMs: number;
  /** Load after the restarted server answers, ms. */
  readonly afterMs: number;
  readonly bucketMs: number;
}

/** One call: when it started and settled (ms on `performance.now()`), who answered, the verdict. */
interface Sample {
  readonly start: number;
  readonly end: number;
  readonly source: 'store' | 'fallback' | 'error' | 'other';
  readonly allowed: boolean;
}

/** Decisions of one policy in one time bucket. */
export interface Bucket {
  store: number;
  fallback: number;
  error: number;
  other: number;
  admitted: number;
}

export interface PolicyOutage {
  readonly policy: StoreFailurePolicy;
  readonly buckets: readonly Bucket[];
  readonly decisions: number;
  /** From sending SIGKILL to the first decision answered by the fallback, ms. */
  readonly fallbackAfterKillMs: number;
  /** How long the call that made that decision took, ms (about the timeout if its command timed out). */
  readonly firstFallbackCallMs: number;
  /** From the restarted server answering PING to the first decision made by Redis again, ms. */
  readonly globalAfterReadyMs: number;
  /** Decisions answered by the fallback, and how many of them admitted. */
  readonly fallbackDecisions: number;
  readonly fallbackAdmitted: number;
  /** Most the fallback may admit over the outage by the policy (local: its fair share per window). */
  readonly fallbackBound: number;
  /** Fixed windows the fallback's decisions fell in (local policy: each admits limit / peers). */
  readonly fallbackWindows: number;
  /** Slowest call between the kill and the first global decision after it, ms. */
  readonly slowestOutageMs: number;
  /** Slowest call of the whole run, ms. */
  readonly slowestMs: number;
  readonly errors: number;
  readonly firstError: string | undefined;
}

export interface OutageResult {
  readonly settings: OutageSettings;
  readonly policies: readonly PolicyOutage[];
  /** Times relative to the start of the load, ms. */
  readonly killAt: number;
  readonly killedAt: number;
  readonly restartAt: number;
  readonly readyAt: number;
  readonly endAt: number;
  /** Unhandled promise rejections in the process during the run. */
  readonly unhandled: number;
  readonly redisVersion: string;
}

/** A closed loop of callers on one limiter, recording every call, until `stopped()`. */
async function drive(
  limiter: Limiter,
  resource: string,
  s: OutageSettings,
  stopped: () => boolean,
  out: Sample[],
  errors: string[],
) {
  const caller = async (): Promise<void> => {
    while (!stopped()) {
      const start = performance.now();
      try {
        const d = await limiter.try(resource);
        const source = d.source === undefined || d.source === 'store' ? 'store' : d.source === 'fallback' ? 'fallback' : 'other';
        out.push({ start, end: performance.now(), source, allowed: d.allowed });
      } catch (err) {
        out.push({ start, end: performance.now(), source: 'error', allowed: false });
        if (errors.length === 0) errors.push(err instanceof Error ? err.message : String(err));
      }
      await sleep(s.pauseMs);
    }
  };
  await Promise.all(Array.from({ length: s.callers }, caller));
}

function first(samples: readonly Sample[], pred: (x: Sample) => boolean): Sample | undefined {
  let best: Sample | undefined;
  for (const x of samples) if (pred(x) && (best === undefined || x.end < best.end)) best = x;
  return best;
}

function summarise(
  policy: StoreFailurePolicy,
  samples: readonly Sample[],
  errors: readonly string[],
  t0: number,
  times: { killAt: number; readyAt: number; endAt: number },
  s: OutageSettings,
): PolicyOutage {
  const killAt = t0 + times.killAt;
  const readyAt = t0 + times.readyAt;
  const buckets: Bucket[] = Array.from({ length: Math.ceil(times.endAt / s.bucketMs) }, () => ({
    store: 0,
    fallback: 0,
    error: 0,
    other: 0,
    admitted: 0,
  }));
  for (const x of samples) {
    const b = buckets[Math.min(buckets.length - 1, Math.floor((x.end - t0) / s.bucketMs))];
    if (b === undefined) continue;
    b[x.source]++;
    if (x.allowed) b.admitted++;
  }
  const firstFallback = first(samples, (x) => x.source === 'fallback' && x.end >= killAt);
  const recovered = first(samples, (x) => x.source === 'store' && x.end >= readyAt);
  const outageEnd = recovered?.end ?? t0 + times.endAt;
  const fallback = samples.filter((x) => x.source === 'fallback');
  const fallbackAdmitted = fallback.filter((x) => x.allowed).length;
  // Fixed windows are aligned to multiples of 1 s on the limiter's clock (performance.now()):
  // count those the fallback's decisions touched, from the earliest call start to the last end.
  let windows = 0;
  if (fallback.length > 0) {
    const from = Math.min(...fallback.map((x) => x.start));
    const to = Math.max(...fallback.map((x) => x.end));
    windows = Math.floor(to / 1000) - Math.floor(from / 1000) + 1;
  }
  const share = Math.max(1, Math.floor(s.limit / s.peers));
  const bound = policy === 'local' ? share * windows : policy === 'open' ? fallback.length : 0;
  const during = samples.filter((x) => x.end >= killAt && x.start <= outageEnd);
  const latency = (xs: readonly Sample[]) => xs.reduce((m, x) => Math.max(m, x.end - x.start), 0);
  return {
    policy,
    buckets,
    decisions: samples.length,
    fallbackAfterKillMs: firstFallback === undefined ? NaN : firstFallback.end - killAt,
    firstFallbackCallMs: firstFallback === undefined ? NaN : firstFallback.end - firstFallback.start,
    globalAfterReadyMs: recovered === undefined ? NaN : recovered.end - readyAt,
    fallbackDecisions: fallback.length,
    fallbackAdmitted,
    fallbackBound: bound,
    fallbackWindows: windows,
    slowestOutageMs: latency(during),
    slowestMs: latency(samples),
    errors: samples.filter((x) => x.source === 'error').length,
    firstError: errors[0],
  };
}

/**
 * A Redis outage under load: one throwaway redis-server, one Limiter per store-failure policy
 * (each with its own RedisStore, all loaded at once), a SIGKILL of the server after
 * `beforeKillMs`, a restart on the same port `downMs` later, `afterMs` more of load.
 */
export async function runOutage(s: OutageSettings, progress: (line: string) => void): Promise<OutageResult> {
  const server = await startThrowawayRedis({ pollMs: 2 });
  const redisVersion = server.version;
  let unhandled = 0;
  const onUnhandled = () => unhandled++;
  process.on('unhandledRejection', onUnhandled);
  const opened: { limiter: Limiter; store: RedisStore }[] = [];
  try {
    // One resource per policy (its own key in Redis): each policy's limiter has the limit to itself.
    const resources = POLICIES.map((policy) => `bench:${s.runId}:outage:${policy}`);
    for (const [i, policy] of POLICIES.entries()) {
      const resource = resources[i]!;
      const store = await createSluiceStore(server.url, { commandTimeoutMs: s.commandTimeoutMs });
      const limiter = new Limiter({
        store,
        onStoreFailure: policy,
        failover: { peers: s.peers },
        // No pre-filter: every call asks the store (or its fallback), so the timeline shows the
        // store's state rather than keys remembered as over their limit.
        resources: { [resource]: { limits: { algorithm: 'fixed-window', limit: s.limit, windowMs: 1000 }, prefilter: false } },
      });
      opened.push({ limiter, store });
    }
    let stopped = false;
    const samples = POLICIES.map(() => [] as Sample[]);
    const errors = POLICIES.map(() => [] as string[]);
    const t0 = performance.now();
    const load = Promise.all(opened.map((o, i) => drive(o.limiter, resources[i]!, s, () => stopped, samples[i]!, errors[i]!)));
    await sleep(s.beforeKillMs);
    const killAt = performance.now() - t0;
    progress('  SIGKILL redis-server');
    await server.kill();
    const killedAt = performance.now() - t0;
    await sleep(Math.max(0, t0 + killAt + s.downMs - performance.now()));
    const restartAt = performance.now() - t0;
    progress('  restarting redis-server on the same port');
    await server.restart();
    const readyAt = performance.now() - t0;
    await sleep(s.afterMs);
    stopped = true;
    await load;
    const endAt = performance.now() - t0;
    const policies = POLICIES.map((p, i) => summarise(p, samples[i]!, errors[i]!, t0, { killAt, readyAt, endAt }, s));
    for (const p of policies) {
      progress(
        `  ${p.policy}: fallback after ${fmt(p.fallbackAfterKillMs)} ms, global again ${fmt(p.globalAfterReadyMs)} ms after the restart`,
      );
    }
    return { settings: s, policies, killAt, killedAt, restartAt, readyAt, endAt, unhandled, redisVersion };
  } finally {
    for (const { limiter, store } of opened) {
      await limiter.close().catch(() => undefined);
      await store.close().catch(() => undefined);
    }
    await server.stop();
    // Late rejections of the closed clients still count until here.
    process.off('unhandledRejection', onUnhandled);
  }
}

/** The per-100 ms timeline of the outage part. */
export function outageTimelineTable(r: OutageResult): Table {
  const s = r.settings;
  const rows: string[][] = [];
  const n = Math.max(...r.policies.map((p) => p.buckets.length));
  const mark = (from: number, to: number): string => {
    const events: string[] = [];
    if (r.killAt >= from && r.killAt < to) events.push('SIGKILL');
    if (r.restartAt >= from && r.restartAt < to) events.push('restart');
    if (r.readyAt >= from && r.readyAt < to) events.push('answers');
    return events.join(', ');
  };
  for (let i = 0; i < n; i++) {
    const from = i * s.bucketMs;
    const row = [fmt(from / 1000, 1), mark(from, from + s.bucketMs)];
    for (const p of r.policies) {
      const b = p.buckets[i] ?? { store: 0, fallback: 0, error: 0, other: 0, admitted: 0 };
      row.push(`${b.store}/${b.fallback}/${b.error}${b.other > 0 ? `/+${b.other}` : ''}`, String(b.admitted));
    }
    rows.push(row);
  }
  return {
    title: `Redis outage timeline: decisions per ${s.bucketMs} ms by source (store/fallback/error) and admitted, per policy`,
    header: ['t (s)', 'event', ...r.policies.flatMap((p) => [`${p.policy} s/f/e`, `${p.policy} adm`])],
    align: ['right', 'left', ...r.policies.flatMap(() => ['right', 'right'] as const)],
    rows,
    notes: [
      `A throwaway redis-server ${r.redisVersion}; per policy, one Limiter over its own RedisStore (commandTimeoutMs ${s.commandTimeoutMs}),`,
      `failover: { peers: ${s.peers} }, its own resource with a fixed window of ${s.limit}/s and no pre-filter; ${s.callers} callers per`,
      `policy, each calling \`try\` again ${s.pauseMs} ms after its previous call settled. The server is SIGKILLed at`,
      `${fmt(r.killAt / 1000, 3)} s, restarted on the same port at ${fmt(r.restartAt / 1000, 3)} s and answers PING at ${fmt(r.readyAt / 1000, 3)} s.`,
      'A decision counts in the bucket in which it settled. s = decided by Redis, f = by the store-failure policy',
      '(source "fallback"), e = the call threw.',
    ],
  };
}

/** What the outage part shows per policy. */
export function outageSummaryTable(r: OutageResult): Table {
  const s = r.settings;
  const share = Math.max(1, Math.floor(s.limit / s.peers));
  return {
    title: 'Redis outage: switch-over, recovery and admissions per policy',
    header: [
      'policy',
      'decisions',
      'fallback after kill ms',
      'that call took ms',
      'global after restart ms',
      'fallback decisions',
      'fallback admitted',
      'bound',
      'slowest call in outage ms',
      'errors',
    ],
    rows: r.policies.map((p) => [
      p.policy,
      fmtInt(p.decisions),
      fmt(p.fallbackAfterKillMs, 1),
      fmt(p.firstFallbackCallMs, 1),
      fmt(p.globalAfterReadyMs, 1),
      fmtInt(p.fallbackDecisions),
      fmtInt(p.fallbackAdmitted),
      p.policy === 'local'
        ? `${fmtInt(p.fallbackBound)} (${share} x ${p.fallbackWindows} windows)`
        : p.policy === 'open'
          ? `all (${fmtInt(p.fallbackBound)})`
          : '0',
      fmt(p.slowestOutageMs, 1),
      p.errors === 0 ? '0' : `${fmtInt(p.errors)} (${p.firstError ?? ''})`.slice(0, 60),
    ]),
    notes: [
      `"fallback after kill": from sending SIGKILL to the first decision by the policy (target: within one command timeout,`,
      `${s.commandTimeoutMs} ms); "that call took": its own duration: short when the client saw the connection reset, about the`,
      'timeout when its command went into the dead connection first and timed out.',
      `"global after restart": from the restarted server answering PING to the first decision made by`,
      'Redis again (target: within 1 s). Bound: local admits limit / peers per fixed window, each window the fallback',
      `decided in (${s.limit} / ${s.peers} = ${share}); open admits every call; closed none. The slowest call between the kill and`,
      `recovery shows that nothing waits longer than a command timeout (no queue builds up). Unhandled rejections in the`,
      `process during the run: ${r.unhandled}.`,
    ],
  };
}
