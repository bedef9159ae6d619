import { ErrorCodes, SluiceError, type TimeSource } from '@sluice/core';
import type { Cluster, Redis } from 'ioredis';
import { toStoreError } from './errors.js';

/** Longest a {@link redisTimeSource} reading of a plain client may take, in ms. */
const DEFAULT_CLIENT_TIMEOUT_MS = 1000;

/**
 * A `TIME` reply (seconds and microseconds, as numbers or strings) in epoch ms; anything else
 * is a `SLUICE_ERR_STORE_PROTOCOL`.
 */
export function parseRedisTime(reply: unknown): number {
  if (Array.isArray(reply) && reply.length === 2) {
    const seconds = Number(reply[0]);
    const micros = Number(reply[1]);
    if (Number.isSafeInteger(seconds) && seconds >= 0 && Number.isInteger(micros) && micros >= 0 && micros < 1_000_000) {
      return seconds * 1000 + micros / 1000;
    }
  }
  throw new SluiceError(ErrorCodes.STORE_PROTOCOL, 'Redis answered TIME with something other than seconds and microseconds');
}

/** What {@link redisTimeSource} reads: a `RedisStore` (its `time()`) or an ioredis client. */
export type RedisTimeTarget = { time(): Promise<number> } | Redis | Cluster;

function isStore(target: RedisTimeTarget): target is { time(): Promise<number> } {
  return !('status' in target);
}

/**
 * The time source of a `ClockSkewMonitor` on Redis' clock, the clock every decision is made on.
 * Given a `RedisStore`, readings go through the store (its connection, its command timeout);
 * given an ioredis client (e.g. the one an ownership store or a transport shares), each
 * reading is bounded by `timeoutMs`.
 *
 * @example
 * const skew = new ClockSkewMonitor({ source: redisTimeSource(store), name: 'redis' });
 * skew.start();
 */
export function redisTimeSource(target: RedisTimeTarget, timeoutMs = DEFAULT_CLIENT_TIMEOUT_MS): TimeSource {
  if (isStore(target)) return async () => ({ timeMs: await target.time() });
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 600_000) {
    throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'timeoutMs: must be an integer between 1 and 600000', {
      field: 'timeoutMs',
    });
  }
  const client = target;
  return () => {
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(toStoreError({ kind: 'timeout', ms: timeoutMs })), timeoutMs);
      timer.unref();
    });
    const read = client.time().then(
      (reply) => ({ timeMs: parseRedisTime(reply) }),
      (error: unknown) => {
        throw toStoreError({ kind: 'client', error });
      },
    );
    return Promise.race([read, bound]).finally(() => clearTimeout(timer));
  };
}
