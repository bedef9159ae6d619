import {
  ClockSkewMonitor,
  ErrorCodes,
  SluiceError,
  invalid,
  type Clock,
  type Logger,
  type StoreTimeReading,
  type TimeSource,
} from '@sluice/core';
import { decodeError } from '@sluice/core/wire';
import type { Transport } from './transport.js';

/** The clock-skew check of a `RemoteLimiter` (its `clockSkew` option). */
export interface ClientClockSkewOptions {
  /** How often the service's reading of the store's clock is asked for, in ms. @default 30000 */
  intervalMs?: number;
  /** A skew larger than this (ms) is logged as a warning, and again once back within. @default 1000 */
  thresholdMs?: number;
}

/** Longest wait for `/v1/time`, in ms. */
const TIME_TIMEOUT_MS = 1000;

/**
 * Reads the store's clock through the service: `GET /v1/time` answers the service's own
 * estimate of it (Redis' clock, or the service's clock on the embedded store) with its
 * uncertainty, without a store round trip. A client's skew is thus measured against the store
 * every decision is made on, not against the service host's clock, and its uncertainty adds
 * the service's to half the round trip.
 */
export function serviceTimeSource(transport: Transport, timeoutMs = TIME_TIMEOUT_MS): TimeSource {
  return async (): Promise<StoreTimeReading> => {
    const a = await transport.call('/v1/time', { method: 'GET', timeoutMs });
    if (a.status !== 200) throw decodeError(a.body, a.status);
    const body = a.body as { timeMs?: unknown; uncertaintyMs?: unknown } | null;
    const timeMs = body?.timeMs;
    const uncertaintyMs = body?.uncertaintyMs;
    if (typeof timeMs !== 'number' || !Number.isFinite(timeMs) || typeof uncertaintyMs !== 'number' || !(uncertaintyMs >= 0)) {
      throw new SluiceError(ErrorCodes.STORE_PROTOCOL, 'the service answered /v1/time without timeMs and uncertaintyMs');
    }
    return { timeMs, uncertaintyMs };
  };
}

/**
 * The monitor a `RemoteLimiter` keeps with `clockSkew` set (`undefined` or `false`: none), on
 * the limiter's own connections: one small request every `intervalMs`.
 */
export function clientClockSkew(
  setting: boolean | ClientClockSkewOptions | undefined,
  transport: Transport,
  clock: Clock,
  logger: Logger | undefined,
): ClockSkewMonitor | undefined {
  if (setting === undefined || setting === false) return undefined;
  if (setting !== true && (typeof setting !== 'object' || setting === null)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'clockSkew', 'must be true, false or { intervalMs, thresholdMs }');
  }
  const given = setting === true ? {} : setting;
  return new ClockSkewMonitor({
    source: serviceTimeSource(transport),
    name: 'sluice service',
    ...(given.intervalMs === undefined ? {} : { intervalMs: given.intervalMs }),
    ...(given.thresholdMs === undefined ? {} : { thresholdMs: given.thresholdMs }),
    clock,
    logger: logger ?? false,
  });
}
