import type { BookingInfo, Decision, LimitStatus } from '../shared/decision.js';
import { ErrorCodes, SluiceError, type ErrorCode } from '../shared/errors.js';
import { BOOK_OUTCOMES } from '../store/booking.js';

/**
 * The answers of the service's JSON API, with the one encoder the service (and the test fake of
 * `@sluice/client/testing`) writes them with and the one decoder clients read them with: field
 * names, shapes and rounding live here.
 */

/** A decision as the service answers it. */
export interface DecisionBody {
  readonly allowed: boolean;
  readonly limit: number;
  readonly remaining: number;
  /** Rounded up to a whole ms: a client retrying after it is never early. */
  readonly retryAfterMs: number;
  /** Rounded up to a whole ms. */
  readonly resetAfterMs: number;
  readonly reason: Decision['reason'];
  readonly source: NonNullable<Decision['source']>;
  readonly limitId: string;
  /** The concurrency permit taken (a decision's `permitId`). */
  readonly permitId?: string;
  /** Rounded to a whole ms. */
  readonly waitedMs?: number;
  readonly shadow?: Decision['shadow'];
  /** Per-limit statuses: only when asked for (`?statuses=1`), always on a reservation. */
  readonly statuses?: Decision['statuses'];
  /** For `/v1/book`, `/v1/claim` and checks with `book`: the booking the call made, holds or used. */
  readonly booking?: NonNullable<Decision['booking']>;
  /** Set when the resource's boost pool admitted a call its limits denied. */
  readonly boosted?: true;
  /** During a rollout that splits the resource: whose limits decided (see `Decision.cohort`). */
  readonly cohort?: NonNullable<Decision['cohort']>;
}

/** A reservation as the service answers it (`POST /v1/reserve`): its decision with statuses, and what it got. */
export interface ReserveBody extends DecisionBody {
  /** Permits taken: 0 when fewer than `min` were left. */
  readonly granted: number;
  /** The stamp to return unused permits with (`AdjustItem.at`). */
  readonly at: number;
}

/** `POST /v1/release`. */
export interface ReleaseAnswer {
  readonly released: boolean;
}
/** `POST /v1/renew`. */
export interface RenewAnswer {
  readonly renewed: boolean;
}
/** `POST /v1/adjust`. */
export interface AdjustAnswer {
  readonly adjusted: true;
}
/** `POST /v1/cancel`. */
export interface CancelAnswer {
  readonly cancelled: boolean;
}
/** One item of `POST /v1/outcomes`. */
export interface OutcomeAnswer {
  readonly recorded: true;
}

/** `GET /v1/time`: the store's clock as the service reads it. */
export interface TimeAnswer {
  /** The store's time, epoch ms. */
  readonly timeMs: number;
  /** How far `timeMs` may be off, in ms. */
  readonly uncertaintyMs: number;
  readonly store: 'embedded' | 'redis';
}

/** The body of an {@link ErrorAnswer}: the stable code, a message, and the field at fault. */
export interface ErrorBody {
  readonly code: string;
  readonly message: string;
  readonly field?: string;
}

/** An error as the service answers it, alone or as one item of a batch. */
export interface ErrorAnswer {
  readonly error: ErrorBody;
}

/** A batch's answer: one answer or error per item, in order. */
export interface BatchAnswer<T> {
  readonly results: readonly (T | ErrorAnswer)[];
}

/** The fields of a decision a client needs (per-limit statuses only when asked for). */
export function encodeDecision(d: Decision, statuses = false, cohort: Decision['cohort'] = d.cohort): DecisionBody {
  return {
    allowed: d.allowed,
    limit: d.limit,
    remaining: d.remaining,
    retryAfterMs: Math.ceil(d.retryAfterMs),
    resetAfterMs: Math.ceil(d.resetAfterMs),
    reason: d.reason,
    source: d.source ?? 'store',
    limitId: d.limitId,
    ...(d.permitId === undefined ? {} : { permitId: d.permitId }),
    ...(d.waitedMs === undefined ? {} : { waitedMs: Math.round(d.waitedMs) }),
    ...(d.shadow === undefined ? {} : { shadow: d.shadow }),
    ...(statuses ? { statuses: d.statuses } : {}),
    ...(d.booking === undefined ? {} : { booking: d.booking }),
    ...(d.boosted === true ? { boosted: true as const } : {}),
    ...(cohort === undefined ? {} : { cohort }),
  };
}

/** A reservation's answer: its decision always with statuses (the client serves its lease's decisions from them). */
export function encodeReserve(r: { readonly granted: number; readonly decision: Decision; readonly at: number }): ReserveBody {
  return { granted: r.granted, at: r.at, ...encodeDecision(r.decision, true) };
}

/** An error's answer. */
export function encodeError(code: string, message: string, field?: string): ErrorAnswer {
  return { error: { code, message, ...(field === undefined ? {} : { field }) } };
}

function protocol(message: string): SluiceError {
  return new SluiceError(ErrorCodes.STORE_PROTOCOL, `the service answered ${message}`);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const num = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** A decision as the service answers it, as a {@link Decision}; `SLUICE_ERR_STORE_PROTOCOL` when it is not one. */
export function decodeDecision(body: unknown): Decision {
  if (!isObject(body) || typeof body.allowed !== 'boolean' || !num(body.limit) || !num(body.remaining)) {
    throw protocol('a malformed decision');
  }
  if (!num(body.retryAfterMs) || !num(body.resetAfterMs) || typeof body.reason !== 'string' || typeof body.limitId !== 'string') {
    throw protocol('a malformed decision');
  }
  const statuses = Array.isArray(body.statuses) ? (body.statuses as LimitStatus[]) : [];
  return {
    allowed: body.allowed,
    limit: body.limit,
    remaining: body.remaining,
    retryAfterMs: body.retryAfterMs,
    resetAfterMs: body.resetAfterMs,
    reason: body.reason as Decision['reason'],
    limitId: body.limitId,
    statuses,
    source: (typeof body.source === 'string' ? body.source : 'store') as NonNullable<Decision['source']>,
    ...(typeof body.permitId === 'string' ? { permitId: body.permitId } : {}),
    ...(num(body.waitedMs) ? { waitedMs: body.waitedMs } : {}),
    ...(isObject(body.shadow) ? { shadow: body.shadow as unknown as NonNullable<Decision['shadow']> } : {}),
    ...(body.booking === undefined ? {} : { booking: decodeBooking(body.booking) }),
    ...(body.boosted === true ? { boosted: true as const } : {}),
    ...(body.cohort === 'baseline' || body.cohort === 'candidate' ? { cohort: body.cohort } : {}),
  };
}

/** A decision's `booking` as the service answers it. */
export function decodeBooking(v: unknown): BookingInfo {
  if (
    !isObject(v) ||
    !(BOOK_OUTCOMES as readonly unknown[]).includes(v.outcome) ||
    typeof v.id !== 'string' ||
    !num(v.startsInMs) ||
    !num(v.expiresInMs)
  ) {
    throw protocol('a malformed booking');
  }
  const info = { outcome: v.outcome as BookingInfo['outcome'], id: v.id, startsInMs: v.startsInMs, expiresInMs: v.expiresInMs };
  return typeof v.token === 'string' ? { ...info, token: v.token } : info;
}

/** A reservation as the service answers it; `at` 0 when the service stamped none. */
export function decodeReserve(body: unknown): { granted: number; at: number; decision: Decision } {
  const decision = decodeDecision(body);
  const { granted, at } = body as { granted?: unknown; at?: unknown };
  if (typeof granted !== 'number' || !Number.isInteger(granted) || granted < 0) {
    throw new SluiceError(ErrorCodes.STORE_PROTOCOL, 'the service answered a reservation without a valid "granted"');
  }
  // The service's stamp of the charge (its store's clock, not the client's).
  return { granted, at: typeof at === 'number' && at >= 0 ? at : 0, decision };
}

/** Whether one result of a batch is an error (see {@link decodeError}). */
export function isErrorAnswer(r: unknown): r is ErrorAnswer {
  return typeof r === 'object' && r !== null && 'error' in r;
}

/** The results of a batch of `count` items; `SLUICE_ERR_STORE_PROTOCOL` when there are not as many. */
export function decodeResults(body: unknown, count: number): unknown[] {
  const r = (body as { results?: unknown } | null)?.results;
  if (!Array.isArray(r) || r.length !== count) {
    throw new SluiceError(ErrorCodes.STORE_PROTOCOL, 'the service answered a batch with the wrong number of results');
  }
  return r;
}

/**
 * An {@link ErrorAnswer} (answered with HTTP `status`) as a {@link SluiceError} with the service's
 * code; faults of the service itself as `SLUICE_ERR_STORE_UNAVAILABLE`.
 */
export function decodeError(body: unknown, status: number): SluiceError {
  const e = (body as { error?: { code?: unknown; message?: unknown; field?: unknown } } | null)?.error;
  const code = typeof e?.code === 'string' && e.code.startsWith('SLUICE_ERR_') ? e.code : undefined;
  const message = typeof e?.message === 'string' ? e.message : `the service answered ${status}`;
  if (code === undefined) {
    return new SluiceError(status >= 500 ? ErrorCodes.STORE_UNAVAILABLE : ErrorCodes.STORE_PROTOCOL, message);
  }
  // The service's codes include its own (request-level) ones beyond the core's table.
  return new SluiceError(code as ErrorCode, message, typeof e?.field === 'string' ? { field: e.field } : {});
}
