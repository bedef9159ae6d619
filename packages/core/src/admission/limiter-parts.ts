/**
 * A limiter's parts, built and wired from its options: the store and its guard, the local state
 * (pre-filter, leases, hot keys, wait queues), the resources, and the paths the verbs take.
 */
import { OutcomeRecorders } from '../breakers/outcome-recorders.js';
import { STORE_FAILURE_POLICIES, type StoreFailurePolicy } from '../failover/failover-state.js';
import { Failover, type FailoverOptions } from '../failover/failover.js';
import { HotKeyTrackers } from '../local/hot-keys.js';
import { LeaseCache } from '../local/lease-cache.js';
import { Prefilter } from '../local/prefilter.js';
import { systemClock, type Clock } from '../shared/clock.js';
import { ErrorCodes, invalid } from '../shared/errors.js';
import { resolveLogger } from '../shared/log.js';
import type { LimiterObserver } from '../shared/observer.js';
import { intOption } from '../shared/options.js';
import { DEFAULT_MAX_KEY_LENGTH } from '../shared/policy.js';
import { MemoryStore } from '../store/memory-store.js';
import type { LimitStore } from '../store/store.js';
import { Bookings } from './book.js';
import { Charges } from './charges.js';
import { Decider } from './decide.js';
import type { LimiterOptions } from './limiter-options.js';
import { ResourceTable } from './resource-table.js';
import { Waiting } from './wait-queue.js';

/** The longest wait, and the longest a permit may be renewed for, in ms. */
export const MAX_WAIT_BOUND_MS = 24 * 3600 * 1000;

/** What a `Limiter` is made of. */
export interface LimiterParts {
  readonly clock: Clock;
  readonly observer: LimiterObserver | undefined;
  readonly maxKeyLength: number;
  /** The default wait bound of `acquire`. */
  readonly maxWaitMs: number;
  readonly store: LimitStore;
  /** The limiter closes the store when it closes. */
  readonly ownsStore: boolean;
  readonly failover: Failover;
  readonly resources: ResourceTable;
  readonly prefilter: Prefilter;
  readonly leases: LeaseCache;
  readonly hot: HotKeyTrackers;
  readonly waiting: Waiting;
  readonly outcomes: OutcomeRecorders;
  readonly decider: Decider;
  readonly bookings: Bookings;
  readonly charges: Charges;
}

/** Validates a limiter's options and builds its parts (in the order they were always checked, so an invalid set names the same option first). */
export function limiterParts(options: LimiterOptions): LimiterParts {
  if (typeof options !== 'object' || options === null || typeof options.resources !== 'object') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'resources', 'must be an object of resource -> limits');
  }
  const clock = options.clock ?? systemClock;
  const random = options.random ?? Math.random;
  const observer = options.observer;
  const hot = new HotKeyTrackers(clock, (resource, change) => observer?.hotKey?.({ resource, ...change }));
  const maxKeyLength = intOption(options.maxKeyLength, 'maxKeyLength', DEFAULT_MAX_KEY_LENGTH, 1, 65_536);
  const maxWaitMs = intOption(options.maxWaitMs, 'maxWaitMs', 30_000, 0, MAX_WAIT_BOUND_MS);
  const waiting = new Waiting({
    clock,
    random,
    maxWaitersPerKey: intOption(options.maxWaitersPerKey, 'maxWaitersPerKey', 1000, 1, 1_000_000),
    maxWaitingKeys: intOption(options.maxWaitingKeys, 'maxWaitingKeys', 10_000, 1, 10_000_000),
    maxWaitersPerClient: intOption(options.maxWaitersPerClient, 'maxWaitersPerClient', 1000, 1, 10_000_000),
    concurrencyPollMs: intOption(options.concurrencyPollMs, 'concurrencyPollMs', 50, 1, 60_000),
  });
  const onStoreFailure: StoreFailurePolicy = options.onStoreFailure ?? 'local';
  if (!STORE_FAILURE_POLICIES.includes(onStoreFailure)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'onStoreFailure', `must be one of ${STORE_FAILURE_POLICIES.join(', ')}`);
  }
  const prefilter = new Prefilter(intOption(options.prefilterMaxKeys, 'prefilterMaxKeys', 100_000, 1, 10_000_000));
  const resources = new ResourceTable({ clock, onStoreFailure, maxKeyLength, hot, prefilter });
  for (const [resource, config] of Object.entries(options.resources)) resources.set(resource, config);
  if (options.closeStore !== undefined && typeof options.closeStore !== 'boolean') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'closeStore', 'must be a boolean');
  }
  if (options.store !== undefined && options.maxKeys !== undefined) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'maxKeys', "bounds the limiter's own MemoryStore: give it to the store passed in");
  }
  const store =
    options.store ??
    new MemoryStore({
      clock,
      ...(options.maxKeys === undefined ? {} : { maxKeys: options.maxKeys }),
      ...(observer === undefined ? {} : { observer }),
    });
  const logger = options.logger;
  const failover = new Failover(store, clock, {
    policy: () => resources.policies(),
    usesLocal: () => resources.usesLocal(),
    ...(logger === undefined ? {} : { logger }),
    ...options.failover,
    onSwitch: (e) => {
      options.failover?.onSwitch?.(e);
      observer?.storeSwitched?.({ healthy: e.healthy });
    },
    ...storeCalls(options.failover?.onCall, observer),
  });
  const outcomes = new OutcomeRecorders({
    store,
    clock,
    tallyAll: options.tallyOutcomes === true,
    onStateChange: (resource, from, to) => observer?.fleetBreakerChanged?.({ resource, from, to }),
    onError: (resource, error) => observer?.outcomesFailed?.({ resource, error }),
    ...(observer?.storeCalled === undefined ? {} : { onStoreCall: (call) => observer.storeCalled?.(call) }),
    logger: resolveLogger(logger),
  });
  resources.useOutcomes(outcomes);
  const leases = new LeaseCache(failover, clock, 100_000, 100, (parts, granted) => {
    observer?.leaseRefilled?.({ resource: parts.resource, granted });
  });
  const decider = new Decider({ failover, clock, random, prefilter, leases, hot, outcomes, observer });
  return {
    clock,
    observer,
    maxKeyLength,
    maxWaitMs,
    store,
    ownsStore: options.store === undefined || options.closeStore === true,
    failover,
    resources,
    prefilter,
    leases,
    hot,
    waiting,
    outcomes,
    decider,
    bookings: new Bookings({ failover, decider, outcomes, prefilter, waiting }),
    charges: new Charges({ failover, decider, prefilter, waiting, random, maxTtlMs: MAX_WAIT_BOUND_MS }),
  };
}

/**
 * The failover's `onCall`: the caller's and the observer's `storeCalled`, or none (the store's
 * calls are then not timed at all).
 */
function storeCalls(own: FailoverOptions['onCall'], observer: LimiterObserver | undefined): Pick<FailoverOptions, 'onCall'> {
  if (observer?.storeCalled === undefined) return own === undefined ? {} : { onCall: own };
  return {
    onCall: (call) => {
      own?.(call);
      observer?.storeCalled?.(call);
    },
  };
}
