/**
 * The headers that carry a call's priority and tenant from workflow code to its activities.
 * Shared by the workflow and the activity entry points, so it imports nothing but
 * `@temporalio/common` (safe inside the workflow sandbox).
 */
import { defaultPayloadConverter, type Headers } from '@temporalio/common';

/** Header with the call's priority (`core` or `normal`). */
export const PRIORITY_HEADER = 'sluice-priority';
/** Header with the tenant the call is made for. */
export const TENANT_HEADER = 'sluice-tenant';

/** Traffic classes, as the limiter knows them: `core` may use the core share, `normal` is shed first. */
export type SluicePriority = 'core' | 'normal';

/** What workflow code says about the calls it makes: who they are for and how much they matter. */
export interface SluiceCallContext {
  /** @default unset: the limiter's default ('normal') */
  readonly priority?: SluicePriority;
  /** @default unset: no tenant quota applies */
  readonly tenant?: string;
}

/** Longest tenant name accepted from a header (the limiter's own bound). */
export const MAX_TENANT_LENGTH = 128;

/** True for a valid priority. */
export function isPriority(value: unknown): value is SluicePriority {
  return value === 'core' || value === 'normal';
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
