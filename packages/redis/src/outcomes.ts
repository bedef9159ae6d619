import {
  checkCohort,
  checkOutcomesRequest,
  checkWindow,
  type CircuitState,
  type FleetBreakerStatus,
  type OutcomeTotals,
  type OutcomesRequest,
  type OutcomesResult,
  type TallyRead,
} from '@sluice/core';
import { ScriptCodes } from './codes.js';
import { toStoreError } from './errors.js';
import { hashTag } from './keys.js';
import { loadScript, type LuaScript, type ScriptCall } from './scripts.js';

let script: LuaScript | undefined;

/** The outcomes program (`lua/outcomes.lua`), loaded on first use. */
export function outcomesScriptSource(): LuaScript {
  script ??= loadScript('outcomes.lua', 'outcomes');
  return script;
}

/**
 * Redis names of a resource's outcome data under `prefix`, all under the resource's hash tag:
 * `<prefix>breaker:{r}` the fleet breaker, `<prefix>outcomes:{r}` the tally of every outcome,
 * `<prefix>outcomes:{r}:c:<cohort>` a cohort's (after the tag, so any cohort name reads back).
 */
export function outcomeKeys(prefix: string, resource: string) {
  const tag = hashTag(resource);
  return {
    breaker: `${prefix}breaker:${tag}`,
    tally: (cohort?: string) => (cohort === undefined ? `${prefix}outcomes:${tag}` : `${prefix}outcomes:${tag}:c:${cohort}`),
  };
}

const STATES: readonly CircuitState[] = ['closed', 'open', 'half_open'];

const totalsArgs = (t: OutcomeTotals): string[] => [
  String(t.calls),
  String(t.failures),
  String(t.slow),
  String(t.totalDurationMs),
];

/** The script call of a report (validated as every store validates it). */
export function encodeReport(prefix: string, request: OutcomesRequest): ScriptCall {
  checkOutcomesRequest(request);
  const names = outcomeKeys(prefix, request.resource);
  const cohorts = request.cohorts ?? [];
  const keys = [names.breaker, names.tally(), ...cohorts.map((c) => names.tally(c.cohort))];
  const args = ['report', String(1 + cohorts.length), ...totalsArgs(request.totals)];
  for (const c of cohorts) args.push(...totalsArgs(c.totals));
  const p = request.breaker;
  if (p === undefined) args.push('0');
  else {
    args.push('1', ...[p.windowMs, p.buckets, p.minimumCalls, p.failureRateThreshold, p.slowCallRateThreshold].map(String));
    args.push(String(p.openDurationMs), String(p.halfOpenProbes), request.takeProbe === true ? '1' : '0');
  }
  return { keys, args };
}

function failed(reply: unknown): boolean {
  return Array.isArray(reply) && reply[0] === ScriptCodes.ERR_BAD_ARGUMENT;
}

/** A report's result from the script's reply. */
export function decodeReport(reply: unknown): OutcomesResult {
  if (failed(reply))
    throw toStoreError({ kind: 'script', code: ScriptCodes.ERR_BAD_ARGUMENT, detail: String((reply as unknown[])[1]) });
  if (!Array.isArray(reply) || reply.length !== 4 || reply[0] !== 0)
    throw toStoreError({ kind: 'reply', detail: 'outcomes report' });
  const [, state, retryAfterMs, probe] = reply as number[];
  if (state === -1) return { breaker: undefined };
  const named = STATES[state!];
  if (named === undefined) throw toStoreError({ kind: 'reply', detail: `breaker state ${state}` });
  const breaker: FleetBreakerStatus = { state: named, retryAfterMs: retryAfterMs!, probe: probe === 1 };
  return { breaker };
}

/** The script call that reads a tally. */
export function encodeRead(prefix: string, resource: string, windowMs: number, cohort?: string, read?: TallyRead): ScriptCall {
  checkWindow(windowMs);
  const name = outcomeKeys(prefix, resource).tally(cohort === undefined ? undefined : checkCohort(cohort));
  return { keys: [name], args: ['read', String(windowMs), read?.complete === true ? '1' : '0'] };
}

/** A tally from the script's reply. */
export function decodeRead(reply: unknown): OutcomeTotals {
  if (!Array.isArray(reply) || reply.length !== 5 || reply[0] !== 0)
    throw toStoreError({ kind: 'reply', detail: 'outcomes read' });
  const [, calls, failures, slow, duration] = reply as [number, number, number, number, string];
  return { calls, failures, slow, totalDurationMs: Number(duration) };
}
