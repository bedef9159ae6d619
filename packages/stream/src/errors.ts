/**
 * Faults of the event stream, one hierarchy: every error this package (and `@sluice/governance`)
 * raises is a {@link StreamError}; transport failures are its subclass {@link TransportError}.
 * Every code is listed in docs/errors.md; match on `code`, never on `message`.
 */
export const StreamErrorCodes = Object.freeze({
  /** Bytes that are not a valid event batch or decision message: foreign, truncated, oversized. */
  MALFORMED: 'SLUICE_ERR_STREAM_MALFORMED',
  /** An event or decision handed to an encoder has a field out of range. */
  INVALID_RECORD: 'SLUICE_ERR_STREAM_INVALID_RECORD',
  /** More events or decisions than one batch or message may carry. */
  BATCH_TOO_LARGE: 'SLUICE_ERR_STREAM_BATCH_TOO_LARGE',
  /** The partition ownership store (Redis) failed, did not answer, or refused the call. */
  OWNERSHIP_UNAVAILABLE: 'SLUICE_ERR_STREAM_OWNERSHIP_UNAVAILABLE',
  /** A broker subpath (`@sluice/stream/nats`, ...) was loaded without its client package installed. */
  MISSING_PEER: 'SLUICE_ERR_STREAM_MISSING_PEER',
});

/** A stable stream error code, e.g. `SLUICE_ERR_STREAM_MALFORMED`. */
export type StreamErrorCode = (typeof StreamErrorCodes)[keyof typeof StreamErrorCodes];

/** Codes of {@link TransportError}s: the stream is down, slow, or refused the call. */
export const TransportErrorCodes = Object.freeze({
  /** The stream did not accept the call in time or is unreachable. */
  UNAVAILABLE: 'SLUICE_ERR_STREAM_UNAVAILABLE',
  /** A partition number or message outside the transport's bounds. */
  INVALID: 'SLUICE_ERR_STREAM_INVALID',
  /** The transport was closed. */
  CLOSED: 'SLUICE_ERR_STREAM_CLOSED',
});

/** A stable transport error code, e.g. `SLUICE_ERR_STREAM_UNAVAILABLE`. */
export type TransportErrorCode = (typeof TransportErrorCodes)[keyof typeof TransportErrorCodes];

/** A stream fault with a stable `code` and an optional `cause`. */
export class StreamError extends Error {
  /** Stable machine-readable code. */
  readonly code: StreamErrorCode | TransportErrorCode;

  constructor(code: StreamErrorCode | TransportErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'StreamError';
    this.code = code;
  }
}

/** A transport failure: the stream is down, slow, or refused the call. */
export class TransportError extends StreamError {
  declare readonly code: TransportErrorCode;

  constructor(code: TransportErrorCode, message: string, options?: ErrorOptions) {
    super(code, message, options);
    this.name = 'TransportError';
  }
}

/** True when `err` is a {@link StreamError} (transport errors included), optionally with the given code. */
export function isStreamError(err: unknown, code?: StreamErrorCode | TransportErrorCode): err is StreamError {
  return err instanceof StreamError && (code === undefined || err.code === code);
}

/** True when `err` is a {@link TransportError}, optionally with the given code. */
export function isTransportError(err: unknown, code?: TransportErrorCode): err is TransportError {
  return err instanceof TransportError && (code === undefined || err.code === code);
}
