/**
 * Checks and small tools every transport shares, so that each one rejects the same inputs with
 * the same codes and bounds its waiting the same way.
 */
import { TransportError, TransportErrorCodes } from '../errors.js';
import type { BatchHandler, BatchInfo } from '../transport.js';

/** Largest partition count a transport accepts. */
export const MAX_PARTITIONS = 1024;
/** Default bound on one event batch, in bytes. */
export const DEFAULT_MAX_BATCH_BYTES = 1024 * 1024;
/** Default bound on one decision message, in bytes. */
export const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024;
/** Group names and prefixes: safe as Redis keys, NATS subject tokens and RocketMQ resource names. */
const NAME_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
/** The rule {@link isStreamName} checks, in words, for error messages. */
export const STREAM_NAME_RULE = '1-64 characters of [A-Za-z0-9_-]';

/** Whether every transport takes `name` as a group name or prefix ({@link STREAM_NAME_RULE}). */
export function isStreamName(name: unknown): name is string {
  return typeof name === 'string' && NAME_PATTERN.test(name);
}

/** A short, safe rendering of a rejected value for an error message. */
function describe(value: unknown): string {
  return typeof value === 'number' || typeof value === 'boolean' ? String(value) : typeof value;
}

/** Rejects a partition count outside 1..1024. */
export function checkPartitionCount(partitions: unknown): number {
  if (typeof partitions !== 'number' || !Number.isInteger(partitions) || partitions < 1 || partitions > MAX_PARTITIONS) {
    throw new TransportError(
      TransportErrorCodes.INVALID,
      `partitions must be an integer in 1..${MAX_PARTITIONS}, got ${describe(partitions)}`,
    );
  }
  return partitions;
}

/** Rejects a positive-integer option outside `min..max`. */
export function checkBound(name: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new TransportError(TransportErrorCodes.INVALID, `${name} must be an integer in ${min}..${max}, got ${describe(value)}`);
  }
  return value;
}

/** Rejects a name (group, prefix) that is not {@link STREAM_NAME_RULE}. */
export function checkName(kind: string, name: unknown): string {
  if (!isStreamName(name)) {
    throw new TransportError(TransportErrorCodes.INVALID, `${kind} must be ${STREAM_NAME_RULE}, got ${JSON.stringify(name)}`);
  }
  return name;
}

/** Rejects a partition number outside `0..partitions-1`. */
export function checkPartition(partition: unknown, partitions: number): number {
  if (typeof partition !== 'number' || !Number.isInteger(partition) || partition < 0 || partition >= partitions) {
    throw new TransportError(
      TransportErrorCodes.INVALID,
      `partition must be an integer in 0..${partitions - 1}, got ${describe(partition)}`,
    );
  }
  return partition;
}

/** Rejects a payload that is not a non-empty Uint8Array of at most `maxBytes`. */
export function checkPayload(kind: string, payload: unknown, maxBytes: number): Uint8Array {
  if (!(payload instanceof Uint8Array) || payload.byteLength === 0 || payload.byteLength > maxBytes) {
    const size = payload instanceof Uint8Array ? `${payload.byteLength} bytes` : typeof payload;
    throw new TransportError(TransportErrorCodes.INVALID, `${kind} must be a Uint8Array of 1..${maxBytes} bytes, got ${size}`);
  }
  return payload;
}

/** The error every call on a closed transport rejects with. */
export function closedError(name: string): TransportError {
  return new TransportError(TransportErrorCodes.CLOSED, `${name} transport is closed`);
}

/** Wraps an unknown failure as UNAVAILABLE, keeping TransportErrors as they are. */
export function unavailable(what: string, cause: unknown): TransportError {
  if (cause instanceof TransportError) return cause;
  const detail = cause instanceof Error ? cause.message : String(cause);
  return new TransportError(TransportErrorCodes.UNAVAILABLE, `${what}: ${detail}`, { cause });
}

/**
 * Resolves with `promise`, or rejects with UNAVAILABLE after `ms`: a server that went away must
 * make a call fail in bounded time, never hang.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new TransportError(TransportErrorCodes.UNAVAILABLE, `${what}: no answer within ${ms} ms`)),
      ms,
    );
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Waits `ms` unless `signal` aborts first; never rejects. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    timer.unref();
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Exponential reconnect backoff with full jitter, capped at `maxMs`. */
export function backoffMs(attempt: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 16));
  return Math.max(1, Math.round(ceiling * (0.5 + random() / 2)));
}

/**
 * Runs a batch handler and swallows its failure: a handler that throws must not stop its
 * partition (the caller counts its own failures). `onError` sees the error for logging.
 */
export async function runHandler(
  handler: BatchHandler,
  batch: Uint8Array,
  info: BatchInfo,
  onError: ((err: unknown, info: BatchInfo) => void) | undefined,
): Promise<void> {
  try {
    await handler(batch, info);
  } catch (err) {
    reportSafely(onError, err, info);
  }
}

/** Calls a decision handler, isolating every subscriber from the others' failures. */
export function deliverDecision(
  handler: (message: Uint8Array) => void,
  message: Uint8Array,
  onError: ((err: unknown) => void) | undefined,
): void {
  try {
    handler(message);
  } catch (err) {
    try {
      onError?.(err);
    } catch {
      // A failing error hook must not take the delivery loop down either.
    }
  }
}

function reportSafely(onError: ((err: unknown, info: BatchInfo) => void) | undefined, err: unknown, info: BatchInfo): void {
  try {
    onError?.(err, info);
  } catch {
    // A failing error hook must not take the consumer loop down either.
  }
}

/** Hooks every transport accepts for failures that have no caller to reject. */
export interface TransportHooks {
  /** A batch handler threw; the batch was acknowledged anyway. */
  onHandlerError?: (err: unknown, info: BatchInfo) => void;
  /** A decision handler threw. */
  onDecisionError?: (err: unknown) => void;
  /** A background read failed (server gone, timeout); the consumer retries with backoff. */
  onConsumeError?: (err: unknown, partition: number) => void;
}

/** The hooks of a transport's options, without the rest of them. */
export function hooksOf(options: TransportHooks): TransportHooks {
  return {
    onHandlerError: options.onHandlerError,
    onDecisionError: options.onDecisionError,
    onConsumeError: options.onConsumeError,
  };
}
