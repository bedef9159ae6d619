import type { Clock } from '../shared/clock.js';
import type { FailoverOptions } from '../failover/failover.js';
import type { Logger } from '../shared/log.js';
import type { StoreFailurePolicy } from '../failover/failover-state.js';
import type { LimiterObserver } from '../shared/observer.js';
import type { ResourceConfig } from './resource.js';
import type { LimitStore } from '../store/store.js';

/** Options of `Limiter`. */
export interface LimiterOptions {
  /**
   * Limits per resource (a downstream such as `db:users`): one policy, several, or
   * `ResourceOptions` with a circuit breaker and pre-filter settings.
   */
  resources: Record<string, ResourceConfig>;
  /**
   * Where state lives. A store passed in stays the caller's to close (several limiters may
   * share one), unless `closeStore` says the limiter owns it.
   * @default a new MemoryStore owned (and closed) by the limiter
   */
  store?: LimitStore;
  /**
   * `limiter.close()` also closes `store` (a store made for this limiter alone, e.g. given
   * inline). Without it, close the store yourself after the limiter.
   * @default false (true for the limiter's own MemoryStore)
   */
  closeStore?: boolean;
  /**
   * Most keys the limiter's own MemoryStore holds (see `MemoryStoreOptions.maxKeys`); not
   * allowed with `store`, whose bounds are its own.
   * @default 1_000_000
   */
  maxKeys?: number;
  /** @default systemClock */
  clock?: Clock;
  /** Randomness for pacing jitter. @default Math.random */
  random?: () => number;
  /** @default 256 */
  maxKeyLength?: number;
  /** Default wait bound of `acquire`, in ms. @default 30000 */
  maxWaitMs?: number;
  /** Most callers queued in `acquire` on one key; more are denied with `queue_full`. @default 1000 */
  maxWaitersPerKey?: number;
  /** Most keys with queued callers at once. @default 10000 */
  maxWaitingKeys?: number;
  /**
   * Most callers of one `client` (see `AcquireOptions.client`) queued at once, over all
   * keys; more are denied with `queue_full`. Callers naming no client are not counted.
   * @default 1000
   */
  maxWaitersPerClient?: number;
  /**
   * How often a queue re-asks a concurrency limit: permits released by other processes are not
   * announced, and a denial's retry-after only says when held permits would expire.
   * @default 50
   */
  concurrencyPollMs?: number;
  /** Decision hooks, e.g. Prometheus metrics. */
  observer?: LimiterObserver;
  /** Most keys the local pre-filter remembers as over their limit. @default 100000 */
  prefilterMaxKeys?: number;
  /**
   * What resources do while the store is unavailable (each may override it).
   * @default 'local'
   */
  onStoreFailure?: StoreFailurePolicy;
  /** Fair-share sizing, health probing and logging for store failures. */
  failover?: FailoverOptions;
  /**
   * Where the limiter logs degradations, each as one line when it starts and one when it ends:
   * the store unreachable (unless `failover.logger` says otherwise) and outcome reports the
   * store did not take. A pino logger fits; `false` for nowhere.
   * @default JSON lines on stderr
   */
  logger?: Logger | false;
  /**
   * Send the outcomes of every resource's calls (`Limiter.record`, `Limiter.call`,
   * `Limiter.reportOutcome`) to the store's tallies, which `outcomeTotals` reads fleet-wide (the
   * store must keep tallies). Resources with a fleet-wide breaker send theirs regardless.
   * @default false
   */
  tallyOutcomes?: boolean;
}
