/**
 * Sluice's service: `sluice serve` as a library. An HTTP JSON API (check, acquire, release,
 * adjust; batches answered per item), Envoy's gRPC rate limit service, an admin API for
 * versioned rules, Prometheus metrics, health and readiness.
 *
 * @example
 * import { loadSettings, startServer } from '@sluice/server';
 * const server = await startServer(loadSettings({ rules: ['rules.yaml'], port: '8080', grpcPort: '8081' }));
 * // curl -XPOST localhost:8080/v1/check -H 'content-type: application/json' -d '{"resource":"api:payments"}'
 * process.once('SIGTERM', () => void server.close());
 */
export {
  ALL_ERROR_CODES,
  GrpcStatus,
  ServerError,
  ServerErrorCodes,
  describeError,
  grpcStatusOf,
  httpStatusOf,
  type AnyErrorCode,
  type ErrorBody,
  type ServerErrorCode,
} from './errors.js';
export {
  shouldRateLimit,
  type RlsCode,
  type RlsDescriptor,
  type RlsRequest,
  type RlsResponse,
  type RlsStatus,
} from './envoy/rls.js';
export { OUTCOMES_PATH, PROTO_DIR, RLS_PATH } from './grpc/proto.js';
export { LiveRules, limiterResourceName, type LiveRulesOptions, type RulesAppliedEvent } from './live-rules.js';
export { RolloutMetrics, ServerMetrics, type ResourceStats } from './metrics.js';
export { AUTO_ROLLBACK_AUTHOR, RolloutRunner, candidateResourceName, type RolloutRunnerOptions } from './rollout/runner.js';
export { startRollout, type StartRolloutInput } from './rollout/start.js';
export { startServer, type RunningServer, type StartOptions } from './serve.js';
export {
  RateLimitService,
  type DomainSplit,
  type RolloutRouting,
  type RolloutView,
  type AcquireItem,
  type AdjustItem,
  type CheckItem,
  type ReleaseItem,
} from './service/service.js';
export { SETTINGS, SettingsError, loadSettings, type SettingFlags, type Settings } from './settings.js';
export { type CohortOf, type OutcomeItem, type RateLimitServiceOptions } from './service/service.js';
