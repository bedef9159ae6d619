/**
 * The JSON contract of the service's HTTP API (`/v1/...`): request items, answers, and the one
 * encoder and decoder of each answer. `sluice serve` (`@sluice/server`) writes its answers with
 * it, `@sluice/client` reads them with it, and the client's `FakeService` answers with it, so
 * field names, shapes and rounding cannot drift apart. It loads nothing but the decision and
 * error types of `@sluice/core`.
 *
 * @example
 * import { decodeDecision, encodeDecision, type CheckItem } from '@sluice/core/wire';
 * const item: CheckItem = { resource: 'api:payments', key: 'tenant-a' };
 * const body = encodeDecision(await limiter.try(item.resource, item)); // what the service answers
 * const decision = decodeDecision(JSON.parse(JSON.stringify(body))); // what a client reads
 */
export type {
  AcquireItem,
  AdjustItem,
  Batch,
  BookItem,
  CancelItem,
  CheckItem,
  DecisionItem,
  DecisionQuery,
  OutcomeItem,
  ReleaseItem,
  RenewItem,
  ReserveItem,
} from './requests.js';
export {
  decodeBooking,
  decodeDecision,
  decodeError,
  decodeReserve,
  decodeResults,
  encodeDecision,
  encodeError,
  encodeReserve,
  isErrorAnswer,
  type AdjustAnswer,
  type BatchAnswer,
  type CancelAnswer,
  type DecisionBody,
  type ErrorAnswer,
  type ErrorBody,
  type OutcomeAnswer,
  type ReleaseAnswer,
  type RenewAnswer,
  type ReserveBody,
  type TimeAnswer,
} from './answers.js';
export { encodeResource, type ResourceBody, type ResourcesBody, type RolloutBody } from './resources.js';
