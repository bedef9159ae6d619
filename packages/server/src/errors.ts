import { ErrorCodes, isSluiceError, type ErrorCode } from '@sluice/core';
import { RulesErrorCodes, isRulesError, type RulesErrorCode } from '@sluice/rules';
import { z } from 'zod';

/**
 * Error codes of `@sluice/server`: faults of a request as a whole (its body, its
 * authorization, the server's state). Faults of one item are the core's and rules' codes.
 * The table is the single place where they are defined; the package README documents every
 * code a client can receive, checked by a test.
 */
export const ServerErrorCodes = {
  /** A field is missing, of the wrong type, out of bounds, or not known (unknown fields are rejected). */
  INVALID_REQUEST: 'SLUICE_ERR_INVALID_REQUEST',
  /** The body is not valid JSON (or the gRPC message is not a valid protobuf message). */
  MALFORMED_BODY: 'SLUICE_ERR_MALFORMED_BODY',
  /** The body is larger than `SLUICE_MAX_BODY_BYTES`. */
  BODY_TOO_LARGE: 'SLUICE_ERR_BODY_TOO_LARGE',
  /** A batch has more items than `SLUICE_MAX_BATCH`. */
  BATCH_TOO_LARGE: 'SLUICE_ERR_BATCH_TOO_LARGE',
  /** The body is not `application/json` in UTF-8. */
  UNSUPPORTED_MEDIA_TYPE: 'SLUICE_ERR_UNSUPPORTED_MEDIA_TYPE',
  /** The request (head and body) was not received within `SLUICE_BODY_TIMEOUT_MS`. */
  REQUEST_TIMEOUT: 'SLUICE_ERR_REQUEST_TIMEOUT',
  /** The admin API was called without the right bearer token (or none is configured). */
  UNAUTHORIZED: 'SLUICE_ERR_UNAUTHORIZED',
  /** No such endpoint. */
  NOT_FOUND: 'SLUICE_ERR_NOT_FOUND',
  /** The server has no rules yet. */
  NOT_READY: 'SLUICE_ERR_NOT_READY',
  /** The server is shutting down. */
  SHUTTING_DOWN: 'SLUICE_ERR_SHUTTING_DOWN',
  /** This remote address has `SLUICE_MAX_CLIENT_QUEUED` items waiting for their turn already; retry later. */
  CLIENT_BUSY: 'SLUICE_ERR_CLIENT_BUSY',
  /** A fault in the server itself; the log has the details. */
  INTERNAL: 'SLUICE_ERR_INTERNAL',
  /**
   * A booking was refused: the calling client holds `SLUICE_MAX_BOOKINGS_PER_CLIENT` live
   * bookings already (or the server tracks as many clients as it can). Nothing was booked.
   */
  BOOKING_LIMIT: 'SLUICE_ERR_BOOKING_LIMIT',
} as const;

/** A stable server error code. */
export type ServerErrorCode = (typeof ServerErrorCodes)[keyof typeof ServerErrorCodes];

/** Every code a client of the server can receive: the server's, the core's and the rules'. */
export type AnyErrorCode = ServerErrorCode | ErrorCode | RulesErrorCode;

/** Options for {@link ServerError}. */
export interface ServerErrorOptions {
  field?: string;
  cause?: unknown;
}

/** A request-level fault. Match on `code`, never on `message`. */
export class ServerError extends Error {
  readonly code: ServerErrorCode;
  readonly field: string | undefined;

  constructor(code: ServerErrorCode, message: string, options: ServerErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ServerError';
    this.code = code;
    this.field = options.field;
  }
}

/** gRPC status codes used by the server (numeric values from the gRPC spec). */
export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  DEADLINE_EXCEEDED: 4,
  INVALID_ARGUMENT: 3,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  UNIMPLEMENTED: 12,
  PERMISSION_DENIED: 7,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

type Transport = { readonly http: number; readonly grpc: (typeof GrpcStatus)[keyof typeof GrpcStatus] };

/**
 * The transport status of every code, in one table: typed so that a code added to any
 * package fails the build until it is mapped here. Bad input is always a 4xx.
 */
const TRANSPORT: Readonly<Record<AnyErrorCode, Transport>> = Object.freeze({
  [ServerErrorCodes.INVALID_REQUEST]: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  [ServerErrorCodes.MALFORMED_BODY]: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  [ServerErrorCodes.BODY_TOO_LARGE]: { http: 413, grpc: GrpcStatus.RESOURCE_EXHAUSTED },
  [ServerErrorCodes.BATCH_TOO_LARGE]: { http: 413, grpc: GrpcStatus.INVALID_ARGUMENT },
  [ServerErrorCodes.UNSUPPORTED_MEDIA_TYPE]: { http: 415, grpc: GrpcStatus.INVALID_ARGUMENT },
  [ServerErrorCodes.REQUEST_TIMEOUT]: { http: 408, grpc: GrpcStatus.DEADLINE_EXCEEDED },
  [ServerErrorCodes.UNAUTHORIZED]: { http: 401, grpc: GrpcStatus.UNAUTHENTICATED },
  [ServerErrorCodes.NOT_FOUND]: { http: 404, grpc: GrpcStatus.NOT_FOUND },
  [ServerErrorCodes.NOT_READY]: { http: 503, grpc: GrpcStatus.UNAVAILABLE },
  [ServerErrorCodes.SHUTTING_DOWN]: { http: 503, grpc: GrpcStatus.UNAVAILABLE },
  [ServerErrorCodes.CLIENT_BUSY]: { http: 429, grpc: GrpcStatus.RESOURCE_EXHAUSTED },
  [ServerErrorCodes.INTERNAL]: { http: 500, grpc: GrpcStatus.INTERNAL },
  [ServerErrorCodes.BOOKING_LIMIT]: { http: 429, grpc: GrpcStatus.RESOURCE_EXHAUSTED },
  [ErrorCodes.INVALID_POLICY]: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  [ErrorCodes.INVALID_COST]: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  [ErrorCodes.COST_EXCEEDS_LIMIT]: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  [ErrorCodes.INVALID_KEY]: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  [ErrorCodes.INVALID_OPTIONS]: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  [ErrorCodes.UNKNOWN_RESOURCE]: { http: 404, grpc: GrpcStatus.NOT_FOUND },
  [ErrorCodes.UNKNOWN_TIER]: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  [ErrorCodes.STORE_TIMEOUT]: { http: 503, grpc: GrpcStatus.UNAVAILABLE },
  [ErrorCodes.STORE_UNAVAILABLE]: { http: 503, grpc: GrpcStatus.UNAVAILABLE },
  [ErrorCodes.STORE_PROTOCOL]: { http: 503, grpc: GrpcStatus.UNAVAILABLE },
  // The caller went away; the status is never read, 499 is what proxies log for it.
  [ErrorCodes.ABORTED]: { http: 499, grpc: GrpcStatus.CANCELLED },
  [ErrorCodes.CLOSED]: { http: 503, grpc: GrpcStatus.UNAVAILABLE },
  [ErrorCodes.LIMITED]: { http: 429, grpc: GrpcStatus.RESOURCE_EXHAUSTED },
  [ErrorCodes.BOOKING_TOKEN]: { http: 403, grpc: GrpcStatus.PERMISSION_DENIED },
  [RulesErrorCodes.INVALID_RULES]: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  [RulesErrorCodes.RULE_VERSION_NOT_FOUND]: { http: 404, grpc: GrpcStatus.NOT_FOUND },
  [RulesErrorCodes.RULE_CONFLICT]: { http: 409, grpc: GrpcStatus.FAILED_PRECONDITION },
  [RulesErrorCodes.RULE_STORE_UNAVAILABLE]: { http: 503, grpc: GrpcStatus.UNAVAILABLE },
  [RulesErrorCodes.RULE_STORE_CORRUPT]: { http: 500, grpc: GrpcStatus.INTERNAL },
  [RulesErrorCodes.ROLLOUT_CONFLICT]: { http: 409, grpc: GrpcStatus.FAILED_PRECONDITION },
  [RulesErrorCodes.ROLLOUT_NOT_FOUND]: { http: 404, grpc: GrpcStatus.NOT_FOUND },
});

/** Every code a client can receive. */
export const ALL_ERROR_CODES: readonly AnyErrorCode[] = Object.freeze(Object.keys(TRANSPORT) as AnyErrorCode[]);

/** The HTTP status of a code: the one place where it is decided. */
export function httpStatusOf(code: AnyErrorCode): number {
  return TRANSPORT[code].http;
}

/** The gRPC status of a code: the one place where it is decided. */
export function grpcStatusOf(code: AnyErrorCode): number {
  return TRANSPORT[code].grpc;
}

/** An error as clients see it: `{ error: { code, message, field? } }`. */
export interface ErrorBody {
  readonly code: AnyErrorCode;
  readonly message: string;
  readonly field?: string;
  /** For invalid rules: every problem, each naming its file and path. */
  readonly issues?: readonly { readonly file: string; readonly path: string; readonly message: string }[];
}

function zodField(issue: z.core.$ZodIssue | undefined): string | undefined {
  if (issue === undefined || issue.path.length === 0) return undefined;
  return issue.path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`)).join('');
}

/** The `SLUICE_ERR_INVALID_REQUEST` for a zod failure, naming the first offending field. */
export function fromZod(error: z.ZodError, prefix = ''): ServerError {
  const issue = error.issues[0];
  const inner = zodField(issue);
  const field =
    prefix === '' ? inner : inner === undefined ? prefix : inner.startsWith('[') ? prefix + inner : `${prefix}.${inner}`;
  const message = issue?.message ?? 'is invalid';
  return new ServerError(ServerErrorCodes.INVALID_REQUEST, field === undefined ? message : `${field}: ${message}`, {
    ...(field === undefined ? {} : { field }),
    cause: error,
  });
}

/**
 * What a client is told about `err`. Typed errors keep their code, message and field;
 * anything else is an internal fault whose details stay in the log (`internal: true`).
 */
export function describeError(err: unknown): { body: ErrorBody; internal: boolean } {
  if (err instanceof ServerError || isSluiceError(err)) {
    const body: ErrorBody =
      err.field === undefined
        ? { code: err.code, message: err.message }
        : { code: err.code, message: err.message, field: err.field };
    return { body, internal: false };
  }
  if (isRulesError(err)) {
    const base = { code: err.code, message: err.message } as const;
    const withField = err.field === undefined || err.field === '' ? base : { ...base, field: err.field };
    const body: ErrorBody = err.issues.length > 0 ? { ...withField, issues: err.issues.map((i) => ({ ...i })) } : withField;
    return { body, internal: false };
  }
  if (err instanceof z.ZodError) return describeError(fromZod(err));
  return { body: { code: ServerErrorCodes.INTERNAL, message: 'internal error' }, internal: true };
}
