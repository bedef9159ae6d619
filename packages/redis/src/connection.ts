import type { Cluster, Redis } from 'ioredis';
import { openRedisClient } from './kit.js';
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
  if (source.kind === 'client') return { client: source.client, owned: false, cluster: source.client.isCluster };
  const client = openRedisClient({
    ...(source.kind === 'url' ? { url: source.url } : { clusterNodes: source.nodes }),
    connectTimeoutMs: options.connectTimeoutMs,
    // The store bounds every call it sends itself (adaptively, on one shared timer), and so does
    // its peer registry; ioredis' own per-command timer would only double that, at a few µs of
    // CPU per call (docs/benchmarks.md). It stays as the cap on a Cluster only, whose node
    // connections queue commands until they connect whatever the options say.
    commandTimeoutMs: source.kind === 'cluster' ? (options.commandTimeoutMs ?? options.maxCommandTimeoutMs) : undefined,
    offlineQueue: false,
    resend: false,
    maxRetriesPerRequest: 0,
    retryDelayMs: backoff,
    slotsRefreshIntervalMs: options.slotsRefreshIntervalMs,
    lazyConnect: true,
  });
  return { client, owned: true, cluster: source.kind === 'cluster' };
}
