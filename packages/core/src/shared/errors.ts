import type { Decision } from './decision.js';

/**
 * Every fault Sluice raises is a {@link SluiceError} with a stable `code`. Being rate limited is
 * not a fault: it is a denied {@link Decision}. The table below is the single place where codes
 * are defined and documented; docs/errors.md is checked against it by a test.
 */
export const ErrorCodes = {
  /** A limit policy is malformed (non-positive rate, zero window, burst below 1, ...). */
  INVALID_POLICY: 'SLUICE_ERR_INVALID_POLICY',
  /** A cost or adjustment is not a non-negative safe integer within bounds. */
  INVALID_COST: 'SLUICE_ERR_INVALID_COST',
  /** A cost can never be admitted because it exceeds what the limit can ever hold. */
  COST_EXCEEDS_LIMIT: 'SLUICE_ERR_COST_EXCEEDS_LIMIT',
  /** A key is empty, not a string or longer than the configured bound. */
  INVALID_KEY: 'SLUICE_ERR_INVALID_KEY',
  /** Options passed to a constructor or call are malformed. */
  INVALID_OPTIONS: 'SLUICE_ERR_INVALID_OPTIONS',
  /** A resource name was used that no policy is configured for. */
  UNKNOWN_RESOURCE: 'SLUICE_ERR_UNKNOWN_RESOURCE',
  /** A call names a priority tier its resource does not declare (`priority.tiers`). */
  UNKNOWN_TIER: 'SLUICE_ERR_UNKNOWN_TIER',
  /** The backing store did not answer within its command timeout. */
  STORE_TIMEOUT: 'SLUICE_ERR_STORE_TIMEOUT',
  /** The backing store is unreachable or refused the command. */
  STORE_UNAVAILABLE: 'SLUICE_ERR_STORE_UNAVAILABLE',
  /** The backing store answered something the client cannot interpret. */
  STORE_PROTOCOL: 'SLUICE_ERR_STORE_PROTOCOL',
  /** A wait was cancelled through its AbortSignal. */
  ABORTED: 'SLUICE_ERR_ABORTED',
  /** The limiter or store was used after `close()`. */
  CLOSED: 'SLUICE_ERR_CLOSED',
  /**
   * A booking call named a booking held under another token (or none): only the call that made
   * it, showing the token it was given, may claim, cancel or re-ask about it. Nothing changed.
   */
  BOOKING_TOKEN: 'SLUICE_ERR_BOOKING_TOKEN',
  /** `Limiter.call` was denied; the error's `decision` says why and when to retry. */
  LIMITED: 'SLUICE_ERR_LIMITED',
} as const;

/** A stable error code, e.g. `SLUICE_ERR_INVALID_POLICY`. */
export type ErrorCode = (typeof ErrorCodes)[keyof typeof ErrorCodes];

/** Options for {@link SluiceError}. */
export interface SluiceErrorOptions {
  /** The denial behind a `SLUICE_ERR_LIMITED`. */
  decision?: Decision;
  /** The underlying error, if any. */
  cause?: unknown;
  /** The offending field, as a dotted path (e.g. `limits[0].burst`). */
  field?: string;
}

/**
 * The one error type Sluice throws. Match on `code`, never on `message`.
 *
 * @example
 * try { await limiter.try('api', { key }) } catch (e) {
 *   if (isSluiceError(e, 'SLUICE_ERR_STORE_TIMEOUT')) { ... }
 * }
 */
export class SluiceError extends Error {
  /** Stable machine-readable code. */
  readonly code: ErrorCode;
  /** The offending field, when the error is about input. */
  readonly field: string | undefined;
  /** The denial, for `SLUICE_ERR_LIMITED`. */
  readonly decision: Decision | undefined;

  constructor(code: ErrorCode, message: string, options: SluiceErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'SluiceError';
    this.code = code;
    this.field = options.field;
    this.decision = options.decision;
  }
}

/** True when `err` is a {@link SluiceError}, optionally with the given code. */
export function isSluiceError(err: unknown, code?: ErrorCode): err is SluiceError {
  return err instanceof SluiceError && (code === undefined || err.code === code);
}

/**
 * A value as an error message quotes it, its type plain where a reader could mistake it: `5`,
 * `the string "5"`, `nothing`, `null`, `an object`. A number given as a string reads as a
 * number otherwise (`must be an integer, got 5`).
 */
export function shown(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint')
    return `${typeof value === 'number' ? '' : `the ${typeof value} `}${String(value)}`;
  if (typeof value === 'string') return `the string ${JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}...` : value)}`;
  return Array.isArray(value)
    ? 'an array'
    : typeof value === 'function'
      ? 'a function'
      : typeof value === 'symbol'
        ? 'a symbol'
        : 'an object';
}

/** Shorthand for an input error that names its field. */
export function invalid(code: ErrorCode, field: string, message: string): SluiceError {
  return new SluiceError(code, `${field}: ${message}`, { field });
}
