/** Messages between the accuracy part and its worker processes. */

/** `current`: every option left out; `pre-adaptive`: the earlier defaults, set explicitly. */
export type DefaultsSetup = 'current' | 'pre-adaptive';

/** Who decides in an accuracy run. */
export type AccuracySpec =
  | {
      readonly contender: 'sluice';
      readonly algorithm: 'token-bucket' | 'gcra' | 'sliding-window';
      readonly resource: string;
      readonly limit: number;
      readonly burst: number;
      /** Take permits in leases (`lease: true`) and serve them with `trySync`. */
      readonly lease?: boolean;
      /** Store and failover options as a user leaves them (see defaults-under-load.ts). */
      readonly defaults?: DefaultsSetup;
    }
  | { readonly contender: 'rlf'; readonly keyPrefix: string; readonly limit: number };

export type ToWorker =
  /** Connect and build the limiter for one run; the worker answers `ready`. */
  | { readonly type: 'prepare'; readonly redisUrl: string; readonly spec: AccuracySpec; readonly inFlight: number }
  /** Drive demand from `startAt` for `durationMs` (wall-clock ms); the worker answers `result`. */
  | { readonly type: 'go'; readonly startAt: number; readonly durationMs: number }
  /** Close everything and exit. */
  | { readonly type: 'quit' };

export type FromWorker =
  | { readonly type: 'ready' }
  | {
      readonly type: 'result';
      /** Wall-clock ms (timeOrigin + now) at which each admitted call's decision arrived. */
      readonly admitted: number[];
      /** Store-clock ms (Redis TIME) at which each admission was decided; Sluice only. */
      readonly decided: number[] | undefined;
      readonly decisions: number;
      readonly errors: number;
      readonly firstError?: string;
      /** Decisions made by the local fallback, and switches to it (runs with `defaults`). */
      readonly fallbacks?: number;
      readonly switches?: number;
    }
  | { readonly type: 'failed'; readonly error: string };

/** Wall-clock milliseconds with sub-millisecond resolution, comparable across processes. */
export function wallNow(): number {
  return performance.timeOrigin + performance.now();
}
