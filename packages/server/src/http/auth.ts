import { createHash, timingSafeEqual } from 'node:crypto';

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Compares in time independent of where the strings differ (and of their lengths). */
export function tokenMatches(given: string, expected: string): boolean {
  return timingSafeEqual(digest(given), digest(expected));
}

/**
 * The credentials of an `Authorization: Bearer <token>` value (RFC 6750; the scheme is matched
 * without regard to case, RFC 9110 11.1), or undefined when the value is absent or of another scheme.
 */
export function bearerOf(header: unknown): string | undefined {
  if (typeof header !== 'string') return undefined;
  const match = /^bearer +(\S+) *$/i.exec(header);
  return match?.[1];
}

/**
 * Whether an `Authorization` value carries `token`. With no token configured nothing is
 * required (`token` undefined: every caller passes).
 */
export function authorized(header: unknown, token: string | undefined): boolean {
  if (token === undefined) return true;
  const given = bearerOf(header);
  return given !== undefined && tokenMatches(given, token);
}
