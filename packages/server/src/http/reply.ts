import { rateLimitHeaders as coreRateLimitHeaders, type Decision, type RateLimitHeaderForm } from '@sluice/core';
import type { FastifyReply } from 'fastify';
import { ServerError, ServerErrorCodes, describeError, httpStatusOf, type ErrorBody } from '../errors.js';
import type { Socket } from 'node:net';
import { closeAfter } from './client-errors.js';

/** The header naming the booking a denied call holds (`booking.outcome` `booked`). */
export const BOOKING_HEADER = 'sluice-booking';

/**
 * The rate-limit header fields of a decision on `resource` in `form` (`@sluice/core`'s
 * `rateLimitHeaders`: by default the IETF draft's `RateLimit-Policy` / `RateLimit`), on a
 * denial `Retry-After`, and on a booked denial `Sluice-Booking: <id>`.
 */
export function rateLimitHeaders(
  d: Decision,
  resource: string,
  form: RateLimitHeaderForm = 'draft',
  windowSeconds?: number,
): Record<string, string> {
  const headers = coreRateLimitHeaders(d, { policy: resource, form, ...(windowSeconds === undefined ? {} : { windowSeconds }) });
  // A booking is held: the caller retries after Retry-After with the same id, and is admitted.
  if (d.booking?.outcome === 'booked') headers[BOOKING_HEADER] = d.booking.id;
  return headers;
}

/** Where faults of the server itself are logged: a logger, or a throttled one (see `WarningThrottle.faults`). */
export interface FaultLog {
  error(fields: object, msg: string): void;
}

/**
 * The one way an error leaves the HTTP API: `{ error: { code, message, field? } }` with the
 * status derived from the code. Faults that are not typed are logged and answered as internal.
 */
export function errorReply(err: unknown, log: FaultLog): { status: number; body: { error: ErrorBody } } {
  const { body, internal } = describeError(err);
  if (internal) log.error({ err }, 'request failed');
  return { status: httpStatusOf(body.code), body: { error: body } };
}

/** Sends {@link errorReply}. */
export function sendError(reply: FastifyReply, err: unknown, log: FaultLog): FastifyReply {
  const { status, body } = errorReply(err, log);
  return reply.code(status).send(body);
}

/** Most bytes of a refused request's body read (and dropped) while its peer is given time to close. */
export const REFUSED_BODY_BYTES = 64 * 1024;

/**
 * Answers a call without valid credentials `401` and closes its connection without reading its
 * body: on a kept-alive connection Node would read a body to its end, however long, to find the
 * next request. And Node destroys a socket it answered with `Connection: close` as soon as the
 * answer is written, which resets the connection while a body is still arriving: the reset can
 * reach the peer before it has read its answer. So the connection is closed as
 * {@link closeAfter} does (the server's FIN, then the peer's, cut if it does not come in time),
 * and at most {@link REFUSED_BODY_BYTES} of the body are read meanwhile (and dropped): a peer
 * that sent a small body and closes is closed at once.
 */
export function sendUnauthorized(reply: FastifyReply, message: string, log: FaultLog): FastifyReply {
  const request = reply.request.raw;
  const socket = request.socket as Socket | null;
  // Only on a real socket (fastify's inject has none of its own).
  if (socket !== null && typeof socket.destroySoon === 'function') {
    socket.destroySoon = () => closeAfter(socket, '', true);
    let read = 0;
    const drop = (chunk: Buffer) => {
      read += chunk.length;
      if (read <= REFUSED_BODY_BYTES) return;
      // Nothing more is read: the peer's sends stall, and the connection is cut in time.
      request.off('data', drop);
      request.pause();
    };
    request.on('data', drop);
  }
  return sendError(
    reply.header('www-authenticate', 'Bearer').header('connection', 'close'),
    new ServerError(ServerErrorCodes.UNAUTHORIZED, message),
    log,
  );
}

/** Fastify's own errors (body parsing, URL, limits) as server errors. */
export function fromFastifyError(err: unknown): unknown {
  if (!(err instanceof Error) || err instanceof ServerError) return err;
  const code = (err as { code?: unknown }).code;
  switch (code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ServerError(ServerErrorCodes.BODY_TOO_LARGE, 'the body is larger than the server accepts', { cause: err });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ServerError(ServerErrorCodes.UNSUPPORTED_MEDIA_TYPE, 'the body must be application/json', { cause: err });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new ServerError(ServerErrorCodes.MALFORMED_BODY, 'the body is not valid JSON', { cause: err });
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
    case 'FST_ERR_BAD_URL':
    case 'FST_ERR_MAX_PARAM_LENGTH':
    case 'FST_ERR_ASYNC_CONSTRAINT':
      return new ServerError(ServerErrorCodes.INVALID_REQUEST, err.message, { cause: err });
    default: {
      // Any other client error fastify raised is still the client's: never a 5xx.
      const status = (err as { statusCode?: unknown }).statusCode;
      if (typeof status === 'number' && status >= 400 && status < 500) {
        return new ServerError(ServerErrorCodes.INVALID_REQUEST, err.message, { cause: err });
      }
      return err;
    }
  }
}
