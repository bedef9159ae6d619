import { Cluster, Redis } from 'ioredis';
import type { CompiledRedisStoreOptions } from './options.js';

/** The client a store talks through, and whether the store owns (and so closes) it. */
export interface Connection {
  readonly client: Redis | Cluster;
  readonly owned: boolean;
  readonly cluster: boolean;
}

/** Reconnect backoff: quick first retries, then at most once a second. */
const backoff = (times: number): number => Math.min(times * 50, 1000);

/**
 * Opens (or adopts) the connection described by the options. Connections the store opens fail
 * fast instead of queueing: a command is never held offline to run long after its caller gave
 * up, never re-sent after a reconnect (a decision would be applied twice), and never waits
 * longer than the command timeout.
 */
export function openConnection(options: CompiledRedisStoreOptions): Connection {
  const { source } = options;
  const failFast = {
    connectTimeout: options.connectTimeoutMs,
    // The store bounds every call itself (adaptively); the client's own bound is the cap.
    commandTimeout: options.commandTimeoutMs ?? options.maxCommandTimeoutMs,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
  };
  switch (source.kind) {
    case 'client':
      return { client: source.client, owned: false, cluster: source.client.isCluster };
    case 'url':
      return {
        client: new Redis(source.url, { ...failFast, enableOfflineQueue: false, lazyConnect: true, retryStrategy: backoff }),
        owned: true,
        cluster: false,
      };
    case 'cluster':
      return {
        client: new Cluster(
          source.nodes.map((n) => ({ host: n.host, port: n.port })),
          {
            lazyConnect: true,
            enableOfflineQueue: false,
            slotsRefreshInterval: options.slotsRefreshIntervalMs,
            slotsRefreshTimeout: options.connectTimeoutMs,
            clusterRetryStrategy: backoff,
            retryDelayOnFailover: 100,
            retryDelayOnClusterDown: 100,
            retryDelayOnTryAgain: 100,
            // ioredis forces node connections to queue until connected and never to reconnect
            // (the cluster refreshes its slots instead); the command timeout still bounds them.
            redisOptions: failFast,
          },
        ),
        owned: true,
        cluster: true,
      };
  }
}
