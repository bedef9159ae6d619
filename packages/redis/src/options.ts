import { ErrorCodes, intOption } from '@sluice/core';
import { invalid } from './errors.js';
import type { Cluster, Redis } from 'ioredis';

/** A Redis Cluster seed node: `"host:port"` or `{ host, port }`. */
export type ClusterSeed = string | { readonly host: string; readonly port: number };

/**
 * Options of {@link RedisStore}. Give exactly one of `client`, `url` and `clusterNodes`.
 */
export interface RedisStoreOptions {
  /**
   * An ioredis `Redis` or `Cluster` client to use. The store does not close it; configure its
   * timeouts yourself (see the README): the store bounds every call by `commandTimeoutMs`
   * whatever the client does, and only sends when the client is `ready`.
   */
  client?: Redis | Cluster;
  /** A Redis URL (`redis://host:port/db`, `rediss://...`); the store connects and owns it. */
  url?: string;
  /** Redis Cluster seed nodes; the store connects and owns the cluster client. */
  clusterNodes?: readonly ClusterSeed[];
  /**
   * Prefix of every Redis key the store writes.
   * @default 'sluice:'
   */
  prefix?: string;
  /**
   * A fixed bound on one call, from the moment a batch is formed until its reply, including any
   * wait for the connection to become ready and loading the code into a server that lacks it.
   * Past it the call fails with `SLUICE_ERR_STORE_TIMEOUT` (reply late) or
   * `SLUICE_ERR_STORE_UNAVAILABLE` (never connected), and the limiter's store-failure policy
   * answers that call.
   * @default adaptive: `maxCommandTimeoutMs` until the first reply, then 3 x the p99.9 of the
   * last 1000 replies, between `minCommandTimeoutMs` and `maxCommandTimeoutMs`, doubled after
   * each timeout until a reply comes in time
   */
  commandTimeoutMs?: number;
  /**
   * Floor of the adaptive command timeout, in ms (when `commandTimeoutMs` is not given).
   * @default 50
   */
  minCommandTimeoutMs?: number;
  /**
   * Cap of the adaptive command timeout, in ms: the longest a call waits for a slow Redis, and
   * the timeout of the calls before the first reply (connecting and loading the program).
   * @default 1000
   */
  maxCommandTimeoutMs?: number;
  /**
   * Keep a live count of the processes sharing this Redis (a heartbeat registry under
   * `<prefix>peers`, started with the store and stopped by `close()`): a limiter's `local`
   * fallback is sized to `limit / count` by it. Use one store per process.
   * @default true
   */
  peerRegistry?: boolean;
  /**
   * Connect timeout of connections the store opens itself.
   * @default 2000
   */
  connectTimeoutMs?: number;
  /**
   * Most items decided by one script call; larger bursts are split into several calls sent
   * together. Bounds how long one call holds Redis (about 1 ms at the default).
   * @default 128
   */
  maxBatchSize?: number;
  /**
   * How often a cluster client the store owns refreshes its slot map, in ms.
   * @default 5000
   */
  slotsRefreshIntervalMs?: number;
}

/** {@link RedisStoreOptions} validated, defaulted and frozen. */
export interface CompiledRedisStoreOptions {
  readonly source:
    | { readonly kind: 'client'; readonly client: Redis | Cluster }
    | { readonly kind: 'url'; readonly url: string }
    | { readonly kind: 'cluster'; readonly nodes: readonly { readonly host: string; readonly port: number }[] };
  readonly prefix: string;
  /** Undefined: adaptive. */
  readonly commandTimeoutMs: number | undefined;
  readonly minCommandTimeoutMs: number;
  readonly maxCommandTimeoutMs: number;
  readonly peerRegistry: boolean;
  readonly connectTimeoutMs: number;
  readonly maxBatchSize: number;
  readonly slotsRefreshIntervalMs: number;
}

/** Bounds of the numeric options. */
export const REDIS_STORE_BOUNDS = Object.freeze({
  maxPrefixLength: 128,
  maxTimeoutMs: 600_000,
  /** The script refuses more (lua/batch.lua MAX_ITEMS). */
  maxBatchSize: 4096,
});

function seed(node: unknown, field: string): { host: string; port: number } {
  let host: unknown;
  let port: unknown;
  if (typeof node === 'string') {
    const at = node.lastIndexOf(':');
    host = at > 0 ? node.slice(0, at) : '';
    port = at > 0 ? Number(node.slice(at + 1)) : NaN;
  } else if (typeof node === 'object' && node !== null) {
    ({ host, port } = node as { host: unknown; port: unknown });
  }
  if (
    typeof host !== 'string' ||
    host === '' ||
    typeof port !== 'number' ||
    !Number.isInteger(port) ||
    port < 1 ||
    port > 65535
  ) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, field, `must be "host:port" or { host, port }, got ${JSON.stringify(node)}`);
  }
  return Object.freeze({ host, port });
}

function isClient(value: unknown): value is Redis | Cluster {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { evalsha?: unknown }).evalsha === 'function' &&
    typeof (value as { pipeline?: unknown }).pipeline === 'function' &&
    typeof (value as { status?: unknown }).status === 'string'
  );
}

/** Validates {@link RedisStoreOptions}, fills defaults and freezes the result. */
export function compileRedisStoreOptions(options: RedisStoreOptions): CompiledRedisStoreOptions {
  if (typeof options !== 'object' || options === null) throw invalid(ErrorCodes.INVALID_OPTIONS, 'options', 'must be an object');
  const known = new Set([
    'client',
    'url',
    'clusterNodes',
    'prefix',
    'commandTimeoutMs',
    'minCommandTimeoutMs',
    'maxCommandTimeoutMs',
    'peerRegistry',
    'connectTimeoutMs',
    'maxBatchSize',
    'slotsRefreshIntervalMs',
  ]);
  for (const k of Object.keys(options)) {
    if (!known.has(k)) throw invalid(ErrorCodes.INVALID_OPTIONS, k, 'unknown option');
  }
  const given = (['client', 'url', 'clusterNodes'] as const).filter((k) => options[k] !== undefined);
  if (given.length !== 1) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      'options',
      `give exactly one of client, url and clusterNodes (got ${given.join(', ') || 'none'})`,
    );
  }
  let source: CompiledRedisStoreOptions['source'];
  if (options.client !== undefined) {
    if (!isClient(options.client))
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'client', 'must be an ioredis Redis or Cluster client');
    source = { kind: 'client', client: options.client };
  } else if (options.url !== undefined) {
    if (typeof options.url !== 'string' || !/^rediss?:\/\//.test(options.url)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'url', 'must be a redis:// or rediss:// URL');
    }
    source = { kind: 'url', url: options.url };
  } else {
    const nodes = options.clusterNodes;
    if (!Array.isArray(nodes) || nodes.length === 0) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'clusterNodes', 'must be a non-empty array');
    }
    source = { kind: 'cluster', nodes: Object.freeze(nodes.map((n, i) => seed(n, `clusterNodes[${i}]`))) };
  }
  const prefix = options.prefix ?? 'sluice:';
  if (typeof prefix !== 'string' || prefix.length > REDIS_STORE_BOUNDS.maxPrefixLength) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      'prefix',
      `must be a string of at most ${REDIS_STORE_BOUNDS.maxPrefixLength} characters`,
    );
  }
  const minCommandTimeoutMs = intOption(
    options.minCommandTimeoutMs,
    'minCommandTimeoutMs',
    50,
    1,
    REDIS_STORE_BOUNDS.maxTimeoutMs,
  );
  const maxCommandTimeoutMs = intOption(
    options.maxCommandTimeoutMs,
    'maxCommandTimeoutMs',
    Math.max(1000, minCommandTimeoutMs),
    minCommandTimeoutMs,
    REDIS_STORE_BOUNDS.maxTimeoutMs,
  );
  if (options.peerRegistry !== undefined && typeof options.peerRegistry !== 'boolean') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'peerRegistry', 'must be a boolean');
  }
  return Object.freeze({
    source: Object.freeze(source),
    prefix,
    commandTimeoutMs:
      options.commandTimeoutMs === undefined
        ? undefined
        : intOption(options.commandTimeoutMs, 'commandTimeoutMs', 50, 1, REDIS_STORE_BOUNDS.maxTimeoutMs),
    minCommandTimeoutMs,
    maxCommandTimeoutMs,
    peerRegistry: options.peerRegistry ?? true,
    connectTimeoutMs: intOption(options.connectTimeoutMs, 'connectTimeoutMs', 2000, 1, REDIS_STORE_BOUNDS.maxTimeoutMs),
    maxBatchSize: intOption(options.maxBatchSize, 'maxBatchSize', 128, 1, REDIS_STORE_BOUNDS.maxBatchSize),
    slotsRefreshIntervalMs: intOption(
      options.slotsRefreshIntervalMs,
      'slotsRefreshIntervalMs',
      5000,
      100,
      REDIS_STORE_BOUNDS.maxTimeoutMs,
    ),
  });
}
