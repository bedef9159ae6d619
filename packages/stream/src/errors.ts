/**
 * Faults raised by the stream package outside the transports (codecs, aggregators, ownership).
 * Transport failures are {@link TransportError}s (see transport.ts). Every code is listed in
 * docs/errors.md; match on `code`, never on `message`.
 */
export const StreamErrorCodes = Object.freeze({
  /** Bytes that are not a valid event batch or decision message: foreign, truncated, oversized. */
  MALFORMED: 'SLUICE_ERR_STREAM_MALFORMED',
  /** An event or decision handed to an encoder has a field out of range. */
  INVALID_RECORD: 'SLUICE_ERR_STREAM_INVALID_RECORD',
  /** More events or decisions than one batch or message may carry. */
  BATCH_TOO_LARGE: 'SLUICE_ERR_STREAM_BATCH_TOO_LARGE',
  /** The partition lease store (Redis) failed, did not answer, or refused the call. */
  LEASE_UNAVAILABLE: 'SLUICE_ERR_STREAM_LEASE_UNAVAILABLE',
});

/** A stable stream error code, e.g. `SLUICE_ERR_STREAM_MALFORMED`. */
export type StreamErrorCode = (typeof StreamErrorCodes)[keyof typeof StreamErrorCodes];

/** A stream fault with a stable `code` and an optional `cause`. */
export class StreamError extends Error {
  /** Stable machine-readable code. */
  readonly code: StreamErrorCode;

  constructor(code: StreamErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'StreamError';
    this.code = code;
  }
}

/** True when `err` is a {@link StreamError}, optionally with the given code. */
export function isStreamError(err: unknown, code?: StreamErrorCode): err is StreamError {
  return err instanceof StreamError && (code === undefined || err.code === code);
}
