/**
 * Response headers of the gateway: `Retry-After` (RFC 9110, delay-seconds) and the IETF
 * `RateLimit-Policy` / `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers), both
 * Structured Field lists of one item named after the policy:
 *
 *   RateLimit-Policy: "login-failures";q=0;w=3
 *   RateLimit: "login-failures";r=0;t=3
 *
 * On a 429 the `t` (reset) parameter names the same moment as `Retry-After`, as the draft asks.
 */
import type { Decision } from '@sluice/core';

/** What a governance rule advertises in `RateLimit-Policy` (its quota and window). */
export interface PolicyAdvert {
  /** Quota units per window. */
  quota: number;
  /** The window, in seconds. */
  windowSeconds?: number;
}

/** Whole seconds for a header, rounded up so a client never retries early; at least `min`. */
export function toSeconds(ms: number, min = 0): number {
  const s = Math.ceil(Math.max(0, ms) / 1000);
  return s < min ? min : s;
}

const UNSAFE = /[^\x20-\x7e]/g;
const ESCAPE = /["\\]/g;

/** A Structured Field string (RFC 8941): printable ASCII only, quotes and backslashes escaped. */
export function sfString(value: string): string {
  return `"${value
    .slice(0, 64)
    .replace(UNSAFE, '_')
    .replace(ESCAPE, (c) => `\\${c}`)}"`;
}

/** Headers of a 429 answered from a governance block. */
export function blockHeaders(
  policy: string,
  retryAfterSeconds: number,
  advert: PolicyAdvert | undefined,
): Record<string, string> {
  const name = sfString(policy);
  const w = advert?.windowSeconds ?? retryAfterSeconds;
  return {
    'retry-after': String(retryAfterSeconds),
    'ratelimit-policy': `${name};q=${advert?.quota ?? 0};w=${w}`,
    ratelimit: `${name};r=0;t=${retryAfterSeconds}`,
  };
}

/** Headers for an exact limiter's decision (allowed or not). */
export function limiterHeaders(policy: string, d: Decision): Record<string, string> {
  const name = sfString(policy);
  const headers: Record<string, string> = {
    'ratelimit-policy': `${name};q=${Math.max(0, Math.floor(d.limit))}`,
  };
  if (d.allowed) {
    headers.ratelimit = `${name};r=${Math.max(0, Math.floor(d.remaining))};t=${toSeconds(d.resetAfterMs)}`;
  } else {
    const retry = toSeconds(d.retryAfterMs, 1);
    headers['retry-after'] = String(retry);
    headers.ratelimit = `${name};r=0;t=${retry}`;
  }
  return headers;
}
