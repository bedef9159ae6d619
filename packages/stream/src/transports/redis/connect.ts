/**
 * Connections for the Redis Streams transport: one for publishing (fails fast, never queues
 * offline), one per consumer for its blocking reads, one for the decision subscription.
 */
import { once } from 'node:events';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { TransportError, TransportErrorCodes } from '../../errors.js';
import { backoffMs, withTimeout } from '../common.js';
import { kit } from './client.js';

/** Where the Redis behind the transport is. Exactly one of `url` and `clusterNodes`. */
export interface RedisEndpoint {
  /** Standalone Redis, e.g. `redis://127.0.0.1:6379`. */
  url?: string;
  /** Redis Cluster seed nodes. */
  clusterNodes?: readonly { host: string; port: number }[];
  /** Extra ioredis options for every connection (TLS, password, ...). */
  redisOptions?: RedisOptions;
}

/** Compiled connection settings. */
export interface RedisConnectSettings {
  readonly endpoint: RedisEndpoint;
  readonly commandTimeoutMs: number;
  readonly reconnectBaseMs: number;
  readonly reconnectMaxMs: number;
  readonly onError: (err: unknown) => void;
}

export type RedisClient = Redis | Cluster;

/**
 * Opens one connection. `failFast` connections hold no offline queue: a command sent while the
 * server is away fails at once instead of running long after its caller gave up. Blocking
 * readers get no command timeout (their BLOCK is the bound) and queue while reconnecting.
 */
export function openRedis(settings: RedisConnectSettings, role: 'publish' | 'blocking' | 'subscribe'): RedisClient {
  const { endpoint } = settings;
  const failFast = role === 'publish';
  return kit.openRedisClient({
    ...(endpoint.clusterNodes ? { clusterNodes: endpoint.clusterNodes } : { url: endpoint.url! }),
    ...(endpoint.redisOptions === undefined ? {} : { redisOptions: endpoint.redisOptions }),
    connectTimeoutMs: settings.commandTimeoutMs,
    commandTimeoutMs: role === 'blocking' ? undefined : settings.commandTimeoutMs,
    offlineQueue: !failFast,
    resend: !failFast,
    maxRetriesPerRequest: failFast ? 0 : null,
    retryDelayMs: (times) => backoffMs(times, settings.reconnectBaseMs, settings.reconnectMaxMs),
    slotsRefreshIntervalMs: 5_000,
    onError: settings.onError,
  });
}

/** Waits (bounded) until a fail-fast connection is ready, so the first publish does not fail. */
export async function whenReady(client: RedisClient, timeoutMs: number, what: string): Promise<void> {
  if (client.status === 'ready') return;
  if (client.status === 'end' || client.status === 'close' || client.status === 'reconnecting') {
    throw new TransportError(TransportErrorCodes.UNAVAILABLE, `${what}: Redis connection is ${client.status}`);
  }
  const abort = new AbortController();
  try {
    await withTimeout(once(client, 'ready', { signal: abort.signal }), timeoutMs, what);
  } finally {
    abort.abort();
  }
}
