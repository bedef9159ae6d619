import { ALGORITHMS, type Algorithm, type CompiledLimit } from '../shared/limits.js';
import { concurrency } from './concurrency.js';
import { fixedWindow } from './fixed-window.js';
import { gcra } from './gcra.js';
import { slidingLog } from './sliding-log.js';
import { slidingWindow } from './sliding-window.js';
import { tokenBucket } from './token-bucket.js';
import type { AlgorithmTraits, RateAlgorithm, RateState } from './types.js';

export { concurrency, type ConcurrencyVerdict, type ConcurrencyState, type HeldPermit } from './concurrency.js';
export { fixedWindow } from './fixed-window.js';
export { gcra } from './gcra.js';
export { slidingLog } from './sliding-log.js';
export { slidingWindow } from './sliding-window.js';
export { tokenBucket } from './token-bucket.js';
export * from './types.js';

/** The rate algorithms by code (a dense array: looked up twice on every decision). */
const RATE_BY_CODE: readonly (RateAlgorithm | undefined)[] = (() => {
  const byCode: (RateAlgorithm | undefined)[] = [];
  for (const a of [tokenBucket, gcra, slidingWindow, fixedWindow, slidingLog]) byCode[a.code] = a;
  return byCode;
})();

/** Every algorithm, by name: what each is (see {@link AlgorithmTraits}). */
export const ALGORITHM_TRAITS: Readonly<Record<Algorithm, AlgorithmTraits>> = Object.freeze({
  'token-bucket': tokenBucket,
  gcra,
  'sliding-window': slidingWindow,
  'sliding-log': slidingLog,
  'fixed-window': fixedWindow,
  concurrency,
});

/** The traits by code (a dense array: looked up on every decision). */
const TRAITS_BY_CODE: readonly AlgorithmTraits[] = (() => {
  const byCode: AlgorithmTraits[] = [];
  for (const name of ALGORITHMS) byCode[ALGORITHM_TRAITS[name].code] = ALGORITHM_TRAITS[name];
  return byCode;
})();

/** The algorithm of a compiled limit (by its code). */
export function algorithmOf(limit: Pick<CompiledLimit, 'code'>): AlgorithmTraits {
  return TRAITS_BY_CODE[limit.code]!;
}

/** The rate algorithms' names (every algorithm but concurrency), in {@link ALGORITHMS}' order. */
export const RATE_ALGORITHMS: readonly Exclude<Algorithm, 'concurrency'>[] = Object.freeze(
  ALGORITHMS.filter((a): a is Exclude<Algorithm, 'concurrency'> => ALGORITHM_TRAITS[a].rate),
);

/** The rate algorithm for a code, or undefined (concurrency has no rate algorithm). */
export function rateAlgorithm(code: number): RateAlgorithm | undefined {
  return RATE_BY_CODE[code];
}

/**
 * Brings a stored state in line with the current policy. A state written by another algorithm
 * or with other parameters is converted through its usage (permits in use now), so a rule
 * update carries usage over instead of resetting the key to full.
 */
export function normalizeState(state: RateState | undefined, now: number, limit: CompiledLimit): RateState | undefined {
  if (state === undefined) return undefined;
  const target = RATE_BY_CODE[limit.code];
  if (target === undefined) return undefined;
  if (state[0] === limit.code && target.compatible(state, limit)) return state;
  const source = RATE_BY_CODE[state[0]!];
  if (source === undefined) return undefined;
  return target.fromUsage(source.usage(state, now, limit), now, limit);
}
