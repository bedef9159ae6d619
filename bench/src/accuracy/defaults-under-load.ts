/**
 * The defaults-under-load part: four processes share one limit through Redis with the options a
 * user leaves out, while busy loops (one per core, started and stopped here) keep the machine's
 * cores saturated, so Redis replies and timers are late the way they are on a loaded host. It
 * reports the most admitted in any sliding second (every admission, the fallback's included)
 * against limit + burst, the share of the limit admitted, and how many decisions the local
 * fallback made and how often a process switched to it. The same run with the earlier defaults
 * (a fixed 50 ms timeout, `peers: 1`, a switch on the first timeout) is the peer in the same run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { cpus } from 'node:os';
import { Limiter } from '@sluice/core';
import { wallNow, type AccuracySpec, type DefaultsSetup } from './accuracy-protocol.js';
import { runAccuracy, type AccuracyResult, type AccuracyRun, type AccuracySettings } from './accuracy.js';
import type { Decider } from '../harness/contenders.js';
import { RecordingStore } from '../harness/recording-store.js';
import { startThrowawayRedis } from '../harness/redis-server.js';
import { createSluiceStore } from '../harness/sluice-store.js';
import { fmt, fmtInt, type Table } from '../report/table.js';

/** What the fallback did in one process during a run. */
export interface FallbackStats {
  readonly fallbacks: number;
  readonly switches: number;
}

/** Processes, calls in flight per process, limit and burst: those of the accuracy part. */
const SHAPE = Object.freeze({ processes: 4, inFlight: 64, limit: 1000, burst: 100 });

/**
 * A decider as a user would build it: a RedisStore and a Limiter given nothing but the URL and
 * the limit (`current`), or with the earlier defaults spelled out (`pre-adaptive`). Fallback
 * decisions count as decisions (they are what the caller gets) and are counted. `decided` gets
 * the time of every admission on the clock that made it: Redis `TIME` for the store's, this
 * host's wall clock for the fallback's (the same clock here: Redis runs on this host).
 */
export async function defaultsDecider(
  redisUrl: string,
  spec: Extract<AccuracySpec, { contender: 'sluice' }>,
  setup: DefaultsSetup,
): Promise<{ decider: Decider; stats: () => FallbackStats; decided: number[] }> {
  const redis = await createSluiceStore(redisUrl, setup === 'current' ? {} : { commandTimeoutMs: 50, peerRegistry: false });
  const decided: number[] = [];
  const store = new RecordingStore(redis, (t) => decided.push(t));
  let fallbacks = 0;
  let switches = 0;
  const limiter = new Limiter({
    resources: { [spec.resource]: { algorithm: spec.algorithm, limit: spec.limit, windowMs: 1000, burst: spec.burst } },
    store,
    observer: { storeSwitched: (e) => (switches += e.healthy ? 0 : 1) },
    ...(setup === 'current' ? {} : { failover: { peers: 1, consecutiveFailures: 1, logger: false } }),
  });
  return {
    decider: {
      decide: async (key) => {
        const d = await limiter.try(spec.resource, { key });
        if (d.source === 'fallback') {
          fallbacks++;
          if (d.allowed) decided.push(wallNow());
        }
        return d.allowed;
      },
      close: async () => {
        await limiter.close();
        await store.close();
      },
    },
    stats: () => ({ fallbacks, switches }),
    decided,
  };
}

/**
 * A busy loop in its own process. It spins in 20 ms slices so that it notices its parent going
 * away (the IPC channel closes, or it is re-parented) and exits instead of spinning for ever.
 */
const SPIN = [
  'const parent = process.ppid;',
  "process.on('disconnect', () => process.exit(0));",
  'const spin = () => {',
  '  const end = Date.now() + 20;',
  '  while (Date.now() < end);',
  '  if (process.ppid !== parent) process.exit(0);',
  '  setImmediate(spin);',
  '};',
  'spin();',
].join('\n');

/** Starts `n` busy loops; `stop()` kills them (by their own handles) and waits for their exit. */
export function startBusyLoops(n: number): { stop(): Promise<void> } {
  const children: ChildProcess[] = Array.from({ length: n }, () =>
    spawn(process.execPath, ['-e', SPIN], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] }),
  );
  return {
    async stop() {
      await Promise.all(
        children.map(async (c) => {
          if (c.exitCode !== null || c.signalCode !== null) return;
          const exited = once(c, 'exit');
          c.kill('SIGKILL');
          await exited;
        }),
      );
    },
  };
}

function runs(s: AccuracySettings): AccuracyRun[] {
  return (['current', 'pre-adaptive'] as const).map((setup) => ({
    label: setup === 'current' ? 'default options' : 'earlier defaults: 50 ms timeout, peers: 1, switch on 1st timeout',
    spec: {
      contender: 'sluice',
      algorithm: 'token-bucket',
      resource: `bench:${s.runId}:defaults:${setup}`,
      limit: s.limit,
      burst: s.burst,
      defaults: setup,
    },
    burst: s.burst,
    bound1s: s.limit + s.burst,
    bound100ms: s.burst + s.limit / 10,
  }));
}

/** Runs the part on a throwaway Redis of its own and returns its table. */
export async function runDefaultsUnderLoad(durationMs: number, runId: string, progress: (line: string) => void): Promise<Table> {
  progress('defaults under load (busy cores)...');
  const redis = await startThrowawayRedis();
  const busyLoops = cpus().length;
  const settings: AccuracySettings = { redisUrl: redis.url, runId, durationMs, ...SHAPE };
  const busy = startBusyLoops(busyLoops);
  try {
    return defaultsUnderLoadTable(await runAccuracy(settings, runs(settings), progress), settings, busyLoops);
  } finally {
    await busy.stop();
    await redis.stop();
  }
}

/** The part's table: every admission, the fallback's included, against limit + burst. */
export function defaultsUnderLoadTable(results: readonly AccuracyResult[], s: AccuracySettings, busyLoops: number): Table {
  const header = ['options', 'demand/s', 'admitted/s', 'of limit', '1 s decided', '1 s arrived', '1 s bound'];
  return {
    title: `Defaults under load: ${s.processes} processes sharing ${fmtInt(s.limit)}/s (burst ${s.burst}) through Redis, ${busyLoops} busy loops`,
    header: [...header, 'decided / bound', 'fallback decisions', 'switches', 'errors'],
    rows: results.map((r) => [
      r.label,
      fmtInt(r.demandPerSec),
      fmtInt(r.steadyPerSec),
      fmt(r.steadyPerSec / r.limit, 3),
      r.decidedMax1s === undefined ? 'n/a' : fmtInt(r.decidedMax1s),
      fmtInt(r.max1s),
      fmtInt(r.bound1s),
      r.decidedMax1s === undefined ? 'n/a' : fmt(r.decidedMax1s / r.bound1s, 3),
      `${fmtInt(r.fallbacks ?? 0)} of ${fmtInt(r.decisions)}`,
      fmtInt(r.switches ?? 0),
      r.errors === 0 ? '0' : `${fmtInt(r.errors)} (${r.firstError ?? ''})`.slice(0, 60),
    ]),
    notes: [
      `Each run: ${s.durationMs / 1000} s, every process keeps ${s.inFlight} calls in flight on one shared key (token bucket),`,
      `while ${busyLoops} other processes spin (one per core). "default options": a RedisStore and a Limiter given only the URL`,
      'and the limit. The 1 s columns give the most admissions in any sliding second over every process, fallback',
      'decisions included: "decided" when each was made (Redis TIME for the store\'s, the host\'s wall clock for the',
      'fallback\'s), "arrived" when it reached its caller (adds queueing on the busy cores). The bound is limit + burst.',
      'admitted/s is measured after the first second, on the deciding clock. "switches" counts switches of any process',
      'to its local fallback; "fallback decisions" were answered locally (a timed-out call, or while switched).',
    ],
  };
}
