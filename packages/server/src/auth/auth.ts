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

/** The tokens that decide who may report outcomes (see {@link outcomeAccess}). */
export interface OutcomeCredentials {
  /** The reporting token (`--outcomes-token`). */
  readonly outcomesToken?: string | undefined;
  /** The data-plane token (`--api-token`): reports need it only while no reporting token is set. */
  readonly apiToken?: string | undefined;
  /** The admin token: always accepted. */
  readonly adminToken?: string | undefined;
  /** Take reports without any credential (`--open-outcomes on`; only without the other two). */
  readonly openOutcomes?: boolean | undefined;
}

/** Who may report outcomes, decided once at start. */
export interface OutcomeAccess {
  /** Whether an `Authorization` value may report outcomes (constant time in the token). */
  allows(header: unknown): boolean;
  /** The answer's message when it may not. */
  readonly refusal: string;
  /** Who may report, as the start log names them. */
  readonly reporters: readonly string[];
}

/**
 * Who may report outcomes: they steer fleet breakers, rollouts and adaptive limits, so they
 * need a credential of their own. The admin token always; the reporting token when set; else
 * the data-plane token when set; else (an open data plane) nobody but the admin, unless
 * `openOutcomes` accepts every caller.
 */
export function outcomeAccess(c: OutcomeCredentials): OutcomeAccess {
  const named: [string, string | undefined][] = [
    ['outcomes token', c.outcomesToken],
    ['api token', c.outcomesToken === undefined ? c.apiToken : undefined],
    ['admin token', c.adminToken],
  ];
  const tokens = named.filter((n): n is [string, string] => n[1] !== undefined);
  if (c.openOutcomes === true && c.outcomesToken === undefined && c.apiToken === undefined) {
    return { allows: () => true, refusal: '', reporters: ['anyone (--open-outcomes)'] };
  }
  return {
    allows: (header) =>
      matchesAny(
        header,
        tokens.map((t) => t[1]),
      ),
    refusal:
      tokens.length === 0
        ? 'outcome reports are off: no outcomes, api or admin token is configured (see --outcomes-token)'
        : c.outcomesToken === undefined && c.apiToken === undefined
          ? 'outcome reports need the outcomes or admin token as a bearer token (the data plane is open, reports are not)'
          : 'outcome reports need a valid bearer token',
    reporters: tokens.map((t) => t[0]),
  };
}

/**
 * Whether an `Authorization` value carries one of `tokens` (each compared in constant time,
 * every one of them, so the time does not tell which matched).
 */
export function matchesAny(header: unknown, tokens: readonly string[]): boolean {
  const given = bearerOf(header);
  if (given === undefined) return false;
  let match = false;
  for (const t of tokens) match = tokenMatches(given, t) || match;
  return match;
}
