/**
 * The HTTP header fields that tell a client about its rate limit, built in one place for every
 * Sluice answer that carries them (the gateway's middleware, `sluice serve`'s HTTP API) and for
 * applications that answer by hand.
 *
 * The default form is the IETF draft's (draft-ietf-httpapi-ratelimit-headers, from -07 on): two
 * Structured Field lists of one item named after the policy,
 *
 *   RateLimit-Policy: "api";q=100;w=60
 *   RateLimit: "api";r=42;t=17
 *
 * (`q` the quota, `w` the window in seconds when known, `r` what remains, `t` seconds until it
 * is restored). The `legacy` form is the earlier drafts' three fields that many clients still
 * read (`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`); `both` sends the two.
 * A denial adds `Retry-After` (RFC 9110, delay-seconds, at least 1), and its `t` names the same
 * moment, as the draft asks.
 */
import type { Decision } from './decision.js';

/** Which header fields are sent. */
export const RATE_LIMIT_HEADER_FORMS = ['draft', 'legacy', 'both'] as const;
export type RateLimitHeaderForm = (typeof RATE_LIMIT_HEADER_FORMS)[number];

/** What the fields say, in the units they carry. */
export interface RateLimitFields {
  /** The policy's name (a resource, a rule): a Structured Field string in the draft form. */
  readonly policy: string;
  /** The quota: permits per window. */
  readonly limit: number;
  /** Permits left now. */
  readonly remaining: number;
  /** Seconds until the quota is restored. */
  readonly resetSeconds: number;
  /** The window in seconds, when the policy has one to name. */
  readonly windowSeconds?: number;
  /** Set on a denial: seconds until a retry can succeed. */
  readonly retryAfterSeconds?: number;
}

/** Whole seconds for a header, rounded up so a client never retries early; at least `min`. */
export function headerSeconds(ms: number, min = 0): number {
  const s = Math.ceil(Math.max(0, ms) / 1000);
  return s < min ? min : s;
}

const UNSAFE = /[^\x20-\x7e]/g;
const ESCAPE = /["\\]/g;

/** A Structured Field string (RFC 8941): printable ASCII only, at most 64 characters, quotes and backslashes escaped. */
export function sfString(value: string): string {
  return `"${value
    .slice(0, 64)
    .replace(UNSAFE, '_')
    .replace(ESCAPE, (c) => `\\${c}`)}"`;
}

/** The header fields (lower-case names) of `fields` in `form`. */
export function rateLimitFields(fields: RateLimitFields, form: RateLimitHeaderForm = 'draft'): Record<string, string> {
  const limit = Math.max(0, Math.floor(fields.limit));
  const denied = fields.retryAfterSeconds !== undefined;
  const remaining = denied ? 0 : Math.max(0, Math.floor(fields.remaining));
  const reset = denied ? Math.max(1, fields.retryAfterSeconds) : Math.max(0, fields.resetSeconds);
  const headers: Record<string, string> = {};
  if (form !== 'legacy') {
    const name = sfString(fields.policy);
    headers['ratelimit-policy'] = `${name};q=${limit}${fields.windowSeconds === undefined ? '' : `;w=${fields.windowSeconds}`}`;
    headers.ratelimit = `${name};r=${remaining};t=${reset}`;
  }
  if (form !== 'draft') {
    headers['ratelimit-limit'] = String(limit);
    headers['ratelimit-remaining'] = String(remaining);
    headers['ratelimit-reset'] = String(reset);
  }
  if (denied) headers['retry-after'] = String(reset);
  return headers;
}

/** The header fields of a decision on `policy` (usually its resource's name). */
export function rateLimitHeaders(
  decision: Decision,
  options: { readonly policy: string; readonly form?: RateLimitHeaderForm; readonly windowSeconds?: number },
): Record<string, string> {
  return rateLimitFields(
    {
      policy: options.policy,
      limit: decision.limit,
      remaining: decision.remaining,
      resetSeconds: headerSeconds(decision.resetAfterMs),
      ...(options.windowSeconds === undefined ? {} : { windowSeconds: options.windowSeconds }),
      ...(decision.allowed ? {} : { retryAfterSeconds: headerSeconds(decision.retryAfterMs, 1) }),
    },
    options.form,
  );
}
