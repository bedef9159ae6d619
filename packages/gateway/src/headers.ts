/**
 * Response headers of the gateway, built by `@sluice/core`'s `rateLimitFields`: `Retry-After`
 * (RFC 9110, delay-seconds) and the IETF `RateLimit-Policy` / `RateLimit` fields
 * (draft-ietf-httpapi-ratelimit-headers), Structured Field lists of one item named after the
 * policy, or the earlier drafts' `RateLimit-Limit` / `-Remaining` / `-Reset` (the gateway's
 * `headers` option):
 *
 *   RateLimit-Policy: "login-failures";q=0;w=3
 *   RateLimit: "login-failures";r=0;t=3
 *
 * On a 429 the `t` (reset) parameter names the same moment as `Retry-After`, as the draft asks.
 */
import { headerSeconds, rateLimitFields, rateLimitHeaders, type Decision, type RateLimitHeaderForm } from '@sluice/core';

export { sfString } from '@sluice/core';

/** What a governance rule advertises in `RateLimit-Policy` (its quota and window). */
export interface PolicyAdvert {
  /** Quota units per window. */
  quota: number;
  /** The window, in seconds. */
  windowSeconds?: number;
}

/** Whole seconds for a header, rounded up so a client never retries early; at least `min`. */
export const toSeconds: (ms: number, min?: number) => number = headerSeconds;

/** Headers of a 429 answered from a governance block. */
export function blockHeaders(
  policy: string,
  retryAfterSeconds: number,
  advert: PolicyAdvert | undefined,
  form: RateLimitHeaderForm = 'draft',
): Record<string, string> {
  return rateLimitFields(
    {
      policy,
      limit: advert?.quota ?? 0,
      remaining: 0,
      resetSeconds: retryAfterSeconds,
      windowSeconds: advert?.windowSeconds ?? retryAfterSeconds,
      retryAfterSeconds,
    },
    form,
  );
}

/** Headers for an exact limiter's decision (allowed or not). */
export function limiterHeaders(policy: string, d: Decision, form: RateLimitHeaderForm = 'draft'): Record<string, string> {
  return rateLimitHeaders(d, { policy, form });
}
