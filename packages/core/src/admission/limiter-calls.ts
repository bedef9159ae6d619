/**
 * What a {@link Limiter} call is made of once validated, and the small answers the limiter gives
 * without asking its store (kept apart so limiter.ts reads as the flow of a decision).
 */
import { combineStatuses, unjudgedStatuses, type BookingInfo, type Decision } from '../shared/decision.js';
import { ErrorCodes, SluiceError, invalid } from '../shared/errors.js';
import type { CompiledLimit } from '../shared/policy.js';
import { isTenantName, type CompiledResource } from './resource.js';
import type { StorageKeyParts } from '../store/storage-key.js';
import type { CompiledTier } from './tiers.js';

export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new SluiceError(ErrorCodes.ABORTED, 'the wait was aborted', { cause: signal.reason });
}

/** A client name for the wait queues: any string up to 256 characters ('' names nobody). */
export function checkClient(client: unknown): string {
  if (client === undefined) return '';
  if (typeof client !== 'string' || client.length > 256) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'client', 'must be a string of at most 256 characters');
  }
  return client;
}

/** A validated call: the resource, the caller key and its storage key, its limits and the cost. */
export interface Call {
  readonly resource: CompiledResource;
  /** The caller's key ('' for the resource as a whole). */
  readonly sub: string;
  /** Where the resource's limits are kept for the caller's key (see storage-key.ts). */
  readonly key: string;
  /** What `key` is made of, carried to the store so that nothing reads a storage key back. */
  readonly parts: StorageKeyParts;
  readonly limits: readonly CompiledLimit[];
  readonly cost: number;
  readonly tenant: string | undefined;
  /** The tier's name. */
  readonly priority: string;
  readonly tier: CompiledTier;
}

/** Permits taken on one storage key (and the concurrency permit, if any). */
export interface Charge {
  readonly key: string;
  readonly parts: StorageKeyParts;
  readonly limits: readonly CompiledLimit[];
  /** The concurrency permit taken, if any (a decision's `permitId`). */
  readonly permitId: string | undefined;
}

export function checkTenant(tenant: unknown): string {
  if (typeof tenant !== 'string' || !isTenantName(tenant)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'tenant', "must be 1 to 128 characters without '|' or lone surrogates");
  }
  return tenant;
}

/**
 * True when a call on the resource can be booked: the resource's keys can be (its
 * `paths.bookable`), and the call neither draws on a tenant quota nor holds a share back for a
 * higher tier (see `Limiter.book`).
 */
export function bookable(r: CompiledResource, tenant: string | undefined, coreShare: number): boolean {
  return r.paths.bookable && tenant === undefined && coreShare === 0;
}

export function info(outcome: BookingInfo['outcome'], id: string): BookingInfo {
  return { outcome, id, startsInMs: 0, expiresInMs: 0 };
}

/** The answer to a claim of a booking that cannot exist: denied, nothing judged or charged. */
export function nothingToClaim(limits: readonly CompiledLimit[], id: string): Decision {
  return { ...combineStatuses(unjudgedStatuses(limits)), booking: info('missing', id) };
}

/** The decision of an open circuit breaker: no store call was made. */
export function breakerDecision(limits: readonly CompiledLimit[], retryAfterMs: number): Decision {
  return {
    allowed: false,
    limit: limits[0]!.limit,
    remaining: 0,
    retryAfterMs,
    resetAfterMs: retryAfterMs,
    reason: 'circuit_open',
    limitId: 'breaker',
    statuses: [],
    source: 'breaker',
  };
}

/** Which of a key's wait queues a call waits in: its priority and tenant (see {@link WaitQueues}). */
export function waitKind(call: Call): string {
  // Tier names have no '|' (TIER_NAME), so the tenant after it is read unambiguously.
  return `${call.priority}|${call.tenant ?? ''}`;
}
