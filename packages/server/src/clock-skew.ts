import { ClockSkewMonitor, type ClockSkewObserver, type LimitStore } from '@sluice/core';
import type { TimeAnswer } from '@sluice/core/wire';
import { RedisStore, redisTimeSource } from '@sluice/redis';
import type { Logger } from 'pino';
import { ServerError, ServerErrorCodes } from './errors.js';
import type { Settings } from './settings.js';
import type { ClockSkewView } from './stats/clock.js';

/** The server's clock-skew check: a monitor on Redis' clock, or none on the embedded store. */
export interface ServerClock {
  /** Reading Redis' clock; undefined on the embedded store. */
  readonly monitor: ClockSkewMonitor | undefined;
  readonly thresholdMs: number;
}

/**
 * Starts measuring this server's clock against Redis' (the clock every decision is made on):
 * first reading now (awaited: bounded by the store's command timeout, never rejecting), then
 * every `--skew-interval-ms`. On the embedded store the server's clock is the store's, so
 * there is nothing to measure.
 */
export async function startServerClock(
  store: LimitStore | undefined,
  settings: Pick<Settings, 'skewIntervalMs' | 'skewThresholdMs'>,
  logger: Logger,
  observer: ClockSkewObserver,
): Promise<ServerClock> {
  const thresholdMs = settings.skewThresholdMs;
  if (!(store instanceof RedisStore)) return { monitor: undefined, thresholdMs };
  const monitor = new ClockSkewMonitor({
    source: redisTimeSource(store),
    name: 'redis',
    intervalMs: settings.skewIntervalMs,
    thresholdMs,
    logger,
    observer,
  });
  await monitor.sample();
  monitor.start();
  return { monitor, thresholdMs };
}

/** The `clockSkew` field of `GET /v1/stats`. */
export function clockSkewView(clock: ServerClock): ClockSkewView {
  if (clock.monitor === undefined) return { store: 'embedded', thresholdMs: clock.thresholdMs };
  return { store: 'redis', ...clock.monitor.status() };
}

/** The store's clock as this server reads it (`GET /v1/time`). */
export type StoreTime = TimeAnswer;

/**
 * The store's clock as this server reads it (`timeMs`, epoch ms) and how far that may be off
 * (`uncertaintyMs`), for remote clients measuring their own skew against the store without a
 * Redis connection of their own. Answered from the server's estimate, without a store round
 * trip: a client's reading costs the server nothing but the request. Throws
 * `SLUICE_ERR_NOT_READY` while Redis' clock was never read.
 */
export function storeTime(clock: ServerClock): StoreTime {
  const { monitor } = clock;
  if (monitor === undefined) return { timeMs: Date.now(), uncertaintyMs: 0, store: 'embedded' };
  if (!monitor.estimate.measured) throw new ServerError(ServerErrorCodes.NOT_READY, "Redis' clock has not been read yet");
  return { timeMs: monitor.now(), uncertaintyMs: monitor.uncertaintyMs, store: 'redis' };
}
