import { ErrorCodes, SluiceError, type RateLimiter } from '@sluice/core';
import { isPriority, isTenant } from './headers.js';
import { INPUT_ERROR_CODES, invalidRequestFailure } from './failures.js';
import {
  PERMIT_ACTIVITY,
  RELEASE_ACTIVITY,
  type PermitAnswer,
  type PermitRequest,
  type ReleaseRequest,
} from './permit-protocol.js';

/** The activities behind the workflow helper (`acquirePermit` in `@sluice/temporal/workflow`). */
export interface SluicePermitActivities {
  [PERMIT_ACTIVITY](request: PermitRequest): Promise<PermitAnswer>;
  [RELEASE_ACTIVITY](request: ReleaseRequest): Promise<boolean>;
}

/** Workflow code names its resource at run time (no start-up check): an unknown one is bad input too. */
const INPUT_CODES: ReadonlySet<string> = new Set([...INPUT_ERROR_CODES, ErrorCodes.UNKNOWN_RESOURCE]);

/** Limiter input errors become non-retryable failures; faults stay retryable. */
function rethrow(err: unknown): never {
  if (err instanceof SluiceError && INPUT_CODES.has(err.code)) throw invalidRequestFailure(undefined, err);
  throw err;
}

/**
 * Activities to register on workers that run workflows using the workflow helper: they ask
 * the limiter once (never wait: the workflow sleeps instead) and answer with plain data.
 *
 * @example
 * Worker.create({ activities: { ...myActivities, ...createSluicePermitActivities(limiter) }, ... })
 */
export function createSluicePermitActivities(limiter: RateLimiter): SluicePermitActivities {
  return {
    async [PERMIT_ACTIVITY](request: PermitRequest): Promise<PermitAnswer> {
      if (typeof request !== 'object' || request === null || typeof request.resource !== 'string') {
        throw invalidRequestFailure(undefined, 'a permit request needs a resource');
      }
      if (request.priority !== undefined && !isPriority(request.priority))
        throw invalidRequestFailure(undefined, 'priority must be a tier name (1 to 64 of A-Z a-z 0-9 _ . : -)');
      if (request.tenant !== undefined && !isTenant(request.tenant))
        throw invalidRequestFailure(undefined, 'tenant must be 1 to 128 characters without |');
      try {
        const d = await limiter.try(request.resource, {
          // Absent: the resource's one shared limit; an empty key is the limiter's to refuse.
          ...(request.key === undefined ? {} : { key: request.key }),
          cost: request.cost ?? 1,
          ...(request.priority === undefined ? {} : { priority: request.priority }),
          ...(request.tenant === undefined ? {} : { tenant: request.tenant }),
        });
        return {
          allowed: d.allowed,
          reason: d.reason,
          retryAfterMs: d.retryAfterMs,
          limit: d.limit,
          remaining: d.remaining,
          // The history's field keeps its name (see PermitAnswer.leaseId).
          ...(d.permitId === undefined ? {} : { leaseId: d.permitId }),
        };
      } catch (err) {
        return rethrow(err);
      }
    },
    async [RELEASE_ACTIVITY](request: ReleaseRequest): Promise<boolean> {
      if (typeof request !== 'object' || request === null || typeof request.resource !== 'string') {
        throw invalidRequestFailure(undefined, 'a release request needs a resource and a leaseId (the permit id)');
      }
      try {
        return await limiter.release(request.resource, {
          ...(request.key === undefined ? {} : { key: request.key }),
          permitId: request.leaseId,
        });
      } catch (err) {
        return rethrow(err);
      }
    },
  };
}
