import type { Redis } from 'ioredis';

/** Cumulative counters of a Redis server, from INFO (read-only, safe on a shared server). */
export interface RedisStats {
  /** Commands run, scripts counted once per EVAL/EVALSHA plus each command they issue. */
  readonly calls: number;
  /** Script calls (EVAL, EVALSHA and their read-only forms, FCALL): one per round trip of a script. */
  readonly scripts: number;
  /** Microseconds spent executing them. */
  readonly usec: number;
  /** CPU seconds of the server (user + system). */
  readonly cpuSec: number;
}

const SCRIPT_COMMANDS = new Set(['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro']);

/** Reads the counters, or undefined if the server refuses INFO (some managed services do). */
export async function readRedisStats(client: Redis): Promise<RedisStats | undefined> {
  try {
    const commands = await client.info('commandstats');
    const cpu = await client.info('cpu');
    let calls = 0;
    let scripts = 0;
    let usec = 0;
    for (const m of commands.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
      calls += Number(m[2]);
      usec += Number(m[3]);
      if (SCRIPT_COMMANDS.has(m[1]!)) scripts += Number(m[2]);
    }
    const field = (name: string) => Number(new RegExp(`^${name}:([0-9.]+)`, 'm').exec(cpu)?.[1] ?? NaN);
    return { calls, scripts, usec, cpuSec: field('used_cpu_user') + field('used_cpu_sys') };
  } catch {
    return undefined;
  }
}

/** Counters at zero: the start of a sum of {@link addGrowth}. */
export const ZERO_STATS: RedisStats = Object.freeze({ calls: 0, scripts: 0, usec: 0, cpuSec: 0 });

/** `sum` plus the counters' growth from `before` to `after`; undefined when any of them is. */
export function addGrowth(
  sum: RedisStats | undefined,
  before: RedisStats | undefined,
  after: RedisStats | undefined,
): RedisStats | undefined {
  if (sum === undefined || before === undefined || after === undefined) return undefined;
  return {
    calls: sum.calls + after.calls - before.calls,
    scripts: sum.scripts + after.scripts - before.scripts,
    usec: sum.usec + after.usec - before.usec,
    cpuSec: sum.cpuSec + after.cpuSec - before.cpuSec,
  };
}

/** Redis work per decision and the server's CPU use over a stretch of `seconds`. */
export interface RedisCost {
  readonly callsPerDecision: number;
  /** Script calls per decision: the round trips that carried decisions. */
  readonly scriptsPerDecision: number;
  readonly usecPerDecision: number;
  /** Share of one core the server used, in percent. */
  readonly cpuPercent: number;
}

export function redisCost(
  before: RedisStats | undefined,
  after: RedisStats | undefined,
  decisions: number,
  seconds: number,
): RedisCost | undefined {
  if (before === undefined || after === undefined || decisions === 0) return undefined;
  return {
    callsPerDecision: (after.calls - before.calls) / decisions,
    scriptsPerDecision: (after.scripts - before.scripts) / decisions,
    usecPerDecision: (after.usec - before.usec) / decisions,
    cpuPercent: (100 * (after.cpuSec - before.cpuSec)) / seconds,
  };
}
