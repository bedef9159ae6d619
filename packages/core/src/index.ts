/**
 * Sluice's limiting core: pure algorithms, decisions, the embedded in-memory store and the
 * limiter. No runtime dependencies.
 *
 * @example
 * import { Limiter } from '@sluice/core';
 * const limiter = new Limiter({
 *   resources: {
 *     'db:user_center': [
 *       { algorithm: 'token-bucket', limit: 100, burst: 20 },           // 100/s, bursts of 20
 *       { algorithm: 'fixed-window', limit: 10_000, windowMs: 86_400_000 }, // and 10,000/day
 *     ],
 *   },
 * });
 * const d = await limiter.try('db:user_center', { key: 'tenant-a' });
 * if (!d.allowed) console.log(`retry in ${d.retryAfterMs} ms`);
 * await limiter.close();
 */
export * from './algorithms/index.js';
export {
  BOOKING_BOUNDS,
  BOOK_OUTCOMES,
  DEFAULT_BOOKING,
  MAX_BOOKING_ID_LENGTH,
  MIN_BOOKING_TOKEN_LENGTH,
  bookKey,
  bookedCap,
  bookingTokenRefused,
  cancelBooking,
  checkBookingId,
  checkBookingToken,
  newBookingToken,
  openBookings,
  policyText,
  type Booking,
  type BookingBounds,
  type BookingLedger,
  type BookingState,
  type BookKeyRequest,
  type BookKeyResult,
} from './store/booking.js';
export {
  CircuitBreaker,
  compileFleetBreaker,
  type CircuitBreakerOptions,
  type CircuitPermission,
  type CircuitState,
  type CompiledFleetBreaker,
} from './breakers/circuit-breaker.js';
export {
  MAX_COHORT_LENGTH,
  MAX_REPORT_COHORTS,
  OUTCOME_BUCKETS,
  OUTCOME_BUCKET_MS,
  addTotals,
  newFleetBreakerRecord,
  stepFleetBreaker,
  tallyRange,
  type BreakerBucket,
  type FleetBreakerPolicy,
  type FleetBreakerRecord,
  type FleetBreakerStatus,
} from './breakers/fleet-breaker-state.js';
export { checkCohort, checkOutcomesRequest, checkTotals, checkWindow } from './store/memory-outcomes.js';
export { OutcomeRecorder, type OutcomeRecorderSettings, type OutcomeRecorderStats } from './breakers/outcome-recorder.js';
export { ManualClock, systemClock, type Clock, type TimerHandle } from './shared/clock.js';
export {
  ClockSkewMonitor,
  SkewEstimator,
  clockOffsetOption,
  compileClockSkewMonitorOptions,
  skewExceeds,
  storeClock,
  type ClockOffset,
  type ClockSample,
  type ClockSkewEstimate,
  type ClockSkewMonitorOptions,
  type ClockSkewObserver,
  type ClockSkewStatus,
  type CompiledClockSkewMonitorOptions,
  type StoreTimeReading,
  type TimeSource,
} from './shared/clock-skew.js';
export {
  combineStatuses,
  withReason,
  type BookingVerdict,
  type BookingInfo,
  type Decision,
  type DecisionReason,
  type DecisionSource,
  type LimitStatus,
} from './shared/decision.js';
export {
  RATE_LIMIT_HEADER_FORMS,
  headerSeconds,
  rateLimitFields,
  rateLimitHeaders,
  sfString,
  type RateLimitFields,
  type RateLimitHeaderForm,
} from './shared/rate-limit-headers.js';
export { ErrorCodes, SluiceError, invalid, isSluiceError, type ErrorCode, type SluiceErrorOptions } from './shared/errors.js';
export { AdaptiveTimeout, type AdaptiveTimeoutOptions } from './failover/adaptive-timeout.js';
export { FailureStreak } from './failover/failure-streak.js';
export {
  createStderrLogger,
  errorSummary,
  reasonOf,
  resolveLogger,
  stderrLogger,
  type ErrorSummary,
  type LineWriter,
} from './shared/log.js';
export {
  Degradation,
  secondsText,
  type DegradationLine,
  type DegradationOptions,
  type DegradationSpell,
} from './shared/degradation.js';
export {
  Failover,
  isStoreFailure,
  type FailoverOptions,
  type Logger,
  type PeerCount,
  type StoreHealth,
} from './failover/failover.js';
export {
  FailoverMachine,
  LOCAL_PERMIT_PREFIX,
  STORE_FAILURE_POLICIES,
  answeringPolicy,
  describePolicies,
  fairShare,
  fairShareOf,
  fallbackDecision,
  isLocalPermit,
  localPermitId,
  policyStatuses,
  type FailoverMachineOptions,
  type FailoverStateName,
  type FailoverSwitch,
  type Outage,
  type StoreFailurePolicy,
} from './failover/failover-state.js';
export { adjustKey, evaluateKey, reserveKey, type KeyVerdict, type LimitState } from './store/evaluate.js';
export { Limiter, type LimiterOptions } from './admission/limiter.js';
export { RATE_LIMIT_RESOURCE, rateLimit, type KeyLimiter, type RateLimitOptions } from './admission/rate-limit.js';
export type {
  AcquireOptions,
  AdjustOptions,
  BookOptions,
  CancelOptions,
  PermitOptions,
  Priority,
  RateLimiter,
  TryOptions,
} from './admission/rate-limiter.js';
export { MemoryStore, compileMemoryStoreOptions, type MemoryStoreOptions, type MemoryStoreStats } from './store/memory-store.js';
export type { DecisionMode, LimiterObserver } from './shared/observer.js';
export { OldestFirst } from './local/oldest-first.js';
export { intOption } from './shared/options.js';
export {
  ALGORITHMS,
  ALGORITHM_CODES,
  DEFAULT_MAX_KEY_LENGTH,
  MAX_COST,
  POLICY_BOUNDS,
  capacityOf,
  checkCost,
  checkDelta,
  checkHold,
  checkStamp,
  callKey,
  checkKey,
  checkPermitId,
  optionsPermitId,
  compileLimit,
  compileLimits,
  hasConcurrency,
  maxCost,
  type Algorithm,
  type CompiledLimit,
  type LimitPolicy,
} from './shared/policy.js';
export {
  RESOURCE_PATTERN,
  compileResource,
  type BookingOptions,
  type CompiledResource,
  type PriorityOptions,
  type ResourceConfig,
  type ResourceOptions,
} from './admission/resource.js';
export type { ResourcePaths, SyncSource } from './admission/resource-paths.js';
export {
  MAX_CORE_SHARE,
  MAX_TIERS,
  TIER_NAME,
  isTierName,
  type BoostOptions,
  type CompiledBoost,
  type CompiledPriority,
  type CompiledTier,
  type TierOptions,
} from './admission/tiers.js';
export {
  boostKey,
  escapeKey,
  hasLoneSurrogate,
  resourceKey,
  splitKey,
  storageKey,
  tenantKey,
  unescapeKey,
  type StorageKeyParts,
} from './store/storage-key.js';
export type {
  AdjustRequest,
  BookRequest,
  BookResult,
  CancelRequest,
  ConsumeRequest,
  ConsumeResult,
  LimitStore,
  PermitRequest,
  ReserveRequest,
  ReserveResult,
  StoreCall,
  StoreOperation,
} from './store/store.js';
export { isOutcomeStore } from './store/store.js';
export type { CohortTotals, OutcomeStore, OutcomesRequest, OutcomesResult } from './store/store.js';
export { COHORT_BUCKETS, cohortAt, cohortBucket, type Cohort } from './breakers/cohort.js';
export { NO_OUTCOMES, type OutcomeReport, type OutcomeSource, type OutcomeTotals, type TallyRead } from './breakers/outcomes.js';
export {
  HotKeys,
  compileHotKeyOptions,
  type CompiledHotKeyOptions,
  type HotKey,
  type HotKeyChange,
  type HotKeyOptions,
  type HotKeyReport,
  type HotKeyThreshold,
} from './local/hot-keys.js';
export { SpaceSaving, WindowedSpaceSaving, type Counter, type WindowEstimate } from './local/space-saving.js';
