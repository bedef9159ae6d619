/**
 * Sluice for Temporal workers: permits per downstream resource for activities, shared by every
 * worker process and task queue through one limiter. This is the worker-side entry; workflow
 * code imports `@sluice/temporal/workflow`, metrics come from `@sluice/temporal/metrics`.
 *
 * @example
 * import { Limiter } from '@sluice/core';
 * import { RedisStore } from '@sluice/redis';
 * import { createSluiceInterceptors, createSluicePermitActivities } from '@sluice/temporal';
 *
 * const limiter = new Limiter({
 *   store: new RedisStore({ url: 'redis://127.0.0.1:6379' }),
 *   resources: { 'db:user_center': { algorithm: 'token-bucket', limit: 500, burst: 100 } },
 * });
 * const worker = await Worker.create({
 *   taskQueue: 'sync',
 *   workflowsPath: require.resolve('./workflows'),
 *   activities: { ...activities, ...createSluicePermitActivities(limiter) },
 *   interceptors: {
 *     ...createSluiceInterceptors({ limiter, activities: { syncUser: { resource: 'db:user_center' } } }),
 *     workflowModules: ['@sluice/temporal/workflow'],
 *   },
 * });
 */
export { SluiceActivityGate, remainingBudget, type PermitHeartbeat, type PermitHeartbeatDetails } from './gate.js';
export { SluiceActivityInboundInterceptor, createSluiceInterceptors, wrapActivity } from './interceptor.js';
export {
  INVALID_REQUEST_FAILURE,
  LIMITER_FAULT_FAILURE,
  RATE_LIMITED_FAILURE,
  invalidRequestFailure,
  limiterFaultFailure,
  rateLimitedFailure,
  type RateLimitedDetails,
} from './failures.js';
export {
  MAX_TENANT_LENGTH,
  PRIORITY_HEADER,
  TENANT_HEADER,
  isPriority,
  isTenant,
  readContextHeaders,
  withContextHeaders,
  type SluiceCallContext,
  type SluicePriority,
} from './headers.js';
export type { PermitEvent, SluiceTemporalObserver } from './observer.js';
export {
  MAX_MAPPED_ACTIVITIES,
  MAX_PERMITS_PER_ACTIVITY,
  compileActivityOptions,
  compilePermit,
  type ActivityPermit,
  type CompiledActivityOptions,
  type CompiledPermit,
  type FromArgs,
  type LimiterFaultPolicy,
  type PermitMode,
  type SluiceActivityOptions,
} from './options.js';
export { createSluicePermitActivities, type SluicePermitActivities } from './permit-activities.js';
export {
  PERMIT_ACTIVITY,
  RELEASE_ACTIVITY,
  type PermitAnswer,
  type PermitRequest,
  type ReleaseRequest,
} from './permit-protocol.js';
