import { ErrorCodes, SluiceError, bookingTokenRefused, type ErrorCode } from '@sluice/core';
import { ScriptCodes } from './codes.js';
import { isReply, isReplyError } from './kit.js';

/**
 * Everything that can go wrong between the store and Redis, before it becomes a
 * {@link SluiceError}. Producers describe what happened; {@link toStoreError} alone decides
 * which error code that is.
 */
export type StoreFailure =
  /** The script answered a code other than OK, for the whole call or for one item. */
  | { readonly kind: 'script'; readonly code: number; readonly detail?: string }
  /** ioredis rejected the command. */
  | { readonly kind: 'client'; readonly error: unknown }
  /** The connection was not ready within the call's time budget. */
  | { readonly kind: 'not-ready'; readonly status: string; readonly cause?: unknown }
  /** The connection closed (Redis went away, or the network between); `cause`: the error before it, if any. */
  | { readonly kind: 'closed-connection'; readonly cause?: unknown }
  /** The reply did not arrive within the call's time budget. */
  | { readonly kind: 'timeout'; readonly ms: number }
  /** The reply is not shaped as the protocol says. */
  | { readonly kind: 'reply'; readonly detail: string }
  /** The store was closed. */
  | { readonly kind: 'closed' };

/** Redis error replies that mean "not now" rather than "never": the store is unavailable. */
const TRANSIENT_REPLIES = ['BUSY', 'LOADING', 'READONLY', 'CLUSTERDOWN', 'TRYAGAIN', 'MASTERDOWN', 'OOM', 'MOVED', 'ASK'];

/**
 * True when a call failed only because that server lacks the code: the function is not loaded
 * (FCALL) or the script is not cached (EVALSHA).
 */
export function isNotLoaded(error: unknown): boolean {
  return isReply(error, 'ERR Function not found') || isReply(error, 'NOSCRIPT');
}

/** True when the server has no Redis Functions (before 7.0), or they are not permitted. */
export function lacksFunctions(error: unknown): boolean {
  return isReplyError(error) && /^(ERR unknown command|NOPERM).*\b(fcall|function)\b/i.test(error.message);
}

/** The one place where store failures become typed errors. */
export function toStoreError(failure: StoreFailure): SluiceError {
  switch (failure.kind) {
    case 'script':
      switch (failure.code) {
        case ScriptCodes.ERR_PROTOCOL_VERSION:
          return new SluiceError(
            ErrorCodes.STORE_PROTOCOL,
            `the Redis script speaks another protocol version than this client: ${failure.detail ?? ''}`,
          );
        case ScriptCodes.ERR_BAD_ARGUMENT:
          return new SluiceError(ErrorCodes.STORE_PROTOCOL, `the Redis script refused its arguments: ${failure.detail ?? ''}`);
        case ScriptCodes.ERR_CORRUPT_STATE:
          return new SluiceError(
            ErrorCodes.STORE_PROTOCOL,
            `the Redis key${failure.detail ? ` ${failure.detail}` : ''} holds data Sluice did not write; is the prefix shared with another application?`,
          );
        case ScriptCodes.ERR_NOT_BOOKABLE:
          // The client refuses these before sending; the same error if a caller got past it.
          return new SluiceError(ErrorCodes.INVALID_OPTIONS, 'keys with a concurrency limit cannot be booked');
        case ScriptCodes.ERR_BOOKING_TOKEN:
          return bookingTokenRefused();
        default:
          return new SluiceError(ErrorCodes.STORE_PROTOCOL, `the Redis script answered unknown code ${failure.code}`);
      }
    case 'client': {
      const { error } = failure;
      const message = error instanceof Error ? error.message : String(error);
      if (message === 'Command timed out') {
        return new SluiceError(ErrorCodes.STORE_TIMEOUT, 'Redis did not answer within the command timeout', { cause: error });
      }
      if (isReplyError(error) && !TRANSIENT_REPLIES.some((prefix) => message.startsWith(prefix))) {
        return new SluiceError(ErrorCodes.STORE_PROTOCOL, `Redis refused the command: ${message}`, { cause: error });
      }
      return new SluiceError(ErrorCodes.STORE_UNAVAILABLE, `Redis is unavailable: ${message}`, { cause: error });
    }
    case 'not-ready':
      return new SluiceError(ErrorCodes.STORE_UNAVAILABLE, `Redis is unavailable: the connection is ${failure.status}`, {
        cause: failure.cause,
      });
    case 'closed-connection':
      return new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'the connection to Redis closed', {
        ...(failure.cause === undefined ? {} : { cause: failure.cause }),
      });
    case 'timeout':
      return new SluiceError(ErrorCodes.STORE_TIMEOUT, `Redis did not answer within ${failure.ms} ms`);
    case 'reply':
      return new SluiceError(ErrorCodes.STORE_PROTOCOL, `unexpected reply from the Redis script: ${failure.detail}`);
    case 'closed':
      return new SluiceError(ErrorCodes.CLOSED, 'the Redis store is closed');
  }
}

/** An input error naming its field, worded like the core's. */
export function invalid(code: ErrorCode, field: string, message: string): SluiceError {
  return new SluiceError(code, `${field}: ${message}`, { field });
}
