/**
 * The headers that carry a call's priority and tenant from workflow code to its activities.
 * Shared by the workflow and the activity entry points, so it imports nothing but
 * `@temporalio/common` (safe inside the workflow sandbox).
 */
import { defaultPayloadConverter, type Headers } from '@temporalio/common';

/** Header with the call's priority: its tier (`core`, `normal` or a tier the resource declares). */
export const PRIORITY_HEADER = 'sluice-priority';
/** Header with the tenant the call is made for. */
export const TENANT_HEADER = 'sluice-tenant';

/**
 * A tier name, as the limiter knows them: `core` (may use the core share) or `normal` (shed
 * first), or a tier the resource declares in `priority.tiers` (e.g. `vip`). Which tiers a
 * resource has is the limiter's to say (`SLUICE_ERR_UNKNOWN_TIER`).
 */
export type SluicePriority = 'core' | 'normal' | (string & NonNullable<unknown>);

/**
 * The shape of a tier name: core's `TIER_NAME`, repeated here because this module runs in the
 * workflow sandbox and imports nothing from core (a test checks that the two agree).
 */
export const TIER_NAME_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;

/** What workflow code says about the calls it makes: who they are for and how much they matter. */
export interface SluiceCallContext {
  /** @default unset: the resource's default tier ('normal' without declared tiers) */
  readonly priority?: SluicePriority;
  /** @default unset: no tenant quota applies */
  readonly tenant?: string;
}

/** Longest tenant name accepted from a header (the limiter's own bound). */
export const MAX_TENANT_LENGTH = 128;

/** True for a well-formed tier name (see {@link TIER_NAME_PATTERN}). */
export function isPriority(value: unknown): value is SluicePriority {
  return typeof value === 'string' && TIER_NAME_PATTERN.test(value);
}

/** True for a valid tenant name: 1 to 128 characters without '|'. */
export function isTenant(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && value.length <= MAX_TENANT_LENGTH && !value.includes('|');
}

/** `headers` plus the context's priority and tenant (existing Sluice headers are replaced). */
export function withContextHeaders(headers: Headers, context: SluiceCallContext): Headers {
  const out: Headers = { ...headers };
  if (context.priority !== undefined) out[PRIORITY_HEADER] = defaultPayloadConverter.toPayload(context.priority);
  if (context.tenant !== undefined) out[TENANT_HEADER] = defaultPayloadConverter.toPayload(context.tenant);
  return out;
}

/**
 * Reads priority and tenant from activity headers. Values that are missing, undecodable or
 * invalid are ignored (a header is outside input: it must never crash the activity).
 */
export function readContextHeaders(headers: Headers | undefined): SluiceCallContext {
  const priority = decode(headers?.[PRIORITY_HEADER]);
  const tenant = decode(headers?.[TENANT_HEADER]);
  return {
    ...(isPriority(priority) ? { priority } : {}),
    ...(isTenant(tenant) ? { tenant } : {}),
  };
}

function decode(payload: Headers[string] | undefined): unknown {
  if (payload === undefined) return undefined;
  try {
    return defaultPayloadConverter.fromPayload(payload);
  } catch {
    return undefined;
  }
}
