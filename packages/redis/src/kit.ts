/**
 * What every Sluice package that talks to Redis shares (`@sluice/redis/kit`): opening a
 * connection, telling Redis' error replies apart, and running a plain Lua script by EVALSHA
 * with the EVAL fallback in one place, and the fleet's leaderships (`lua/leadership.lua`). Loads nothing
 * but ioredis and Node's own modules: the rule store and the stream package use it without the
 * limit store.
 *
 * @example
 * const script = plainScript(readFileSync(new URL('./apply.lua', import.meta.url), 'utf8'));
 * const reply = await evalScript(client, script, [key], ['1']);
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Cluster, Redis, type RedisOptions } from 'ioredis';

/** How to open a connection (see {@link openRedisClient}). */
export interface RedisClientSettings {
  /** Standalone Redis, e.g. `redis://127.0.0.1:6379`; or `clusterNodes`, exactly one. */
  readonly url?: string;
  /** Redis Cluster seed nodes. */
  readonly clusterNodes?: readonly { readonly host: string; readonly port: number }[];
  /** Extra ioredis options for every connection (TLS, password, ...). */
  readonly redisOptions?: RedisOptions;
  readonly connectTimeoutMs: number;
  /** Bound on every command; undefined: none (a blocking reader, whose BLOCK is its bound). */
  readonly commandTimeoutMs: number | undefined;
  /** Hold commands while disconnected; false: they fail at once instead of running late. */
  readonly offlineQueue: boolean;
  /** Send commands left unanswered by a disconnect again; never for one that must not apply twice. */
  readonly resend: boolean;
  /** ioredis' retries of one command across reconnects: 0 none, null until it succeeds. */
  readonly maxRetriesPerRequest: number | null;
  /** Milliseconds before reconnect attempt `times`. @default ioredis' own */
  readonly retryDelayMs?: (times: number) => number;
  /** Cluster: how often the slot map is refreshed. @default ioredis' own */
  readonly slotsRefreshIntervalMs?: number;
  /** Connect on the first command instead of at once. @default false */
  readonly lazyConnect?: boolean;
  /** Where connection errors go (ioredis prints them when nothing listens); omitted: nowhere yet. */
  readonly onError?: (error: unknown) => void;
}

/**
 * Opens a connection to standalone Redis or Redis Cluster with the settings every Sluice
 * connection states explicitly, so none inherits a default that holds commands for a long time
 * (a frozen Cluster master stalls writes unless the slot refresh and the command timeout bound
 * them). The caller owns (and closes) it.
 */
export function openRedisClient(settings: RedisClientSettings): Redis | Cluster {
  const node: RedisOptions = {
    ...settings.redisOptions,
    connectTimeout: settings.connectTimeoutMs,
    maxRetriesPerRequest: settings.maxRetriesPerRequest,
    autoResendUnfulfilledCommands: settings.resend,
    ...(settings.commandTimeoutMs === undefined ? {} : { commandTimeout: settings.commandTimeoutMs }),
  };
  const lazyConnect = settings.lazyConnect ?? false;
  const client =
    settings.clusterNodes !== undefined
      ? new Cluster(
          settings.clusterNodes.map((n) => ({ host: n.host, port: n.port })),
          {
            lazyConnect,
            enableOfflineQueue: settings.offlineQueue,
            ...(settings.slotsRefreshIntervalMs === undefined ? {} : { slotsRefreshInterval: settings.slotsRefreshIntervalMs }),
            slotsRefreshTimeout: settings.connectTimeoutMs,
            ...(settings.retryDelayMs === undefined ? {} : { clusterRetryStrategy: settings.retryDelayMs }),
            retryDelayOnFailover: 100,
            retryDelayOnClusterDown: 100,
            retryDelayOnTryAgain: 100,
            // ioredis forces node connections to queue until connected and never to reconnect
            // (the cluster refreshes its slots instead); the command timeout still bounds them.
            redisOptions: node,
          },
        )
      : new Redis(settings.url!, {
          ...node,
          lazyConnect,
          enableOfflineQueue: settings.offlineQueue,
          ...(settings.retryDelayMs === undefined ? {} : { retryStrategy: settings.retryDelayMs }),
        });
  if (settings.onError !== undefined) client.on('error', settings.onError);
  return client;
}

/** Seed nodes named in {@link redisAddress}; the rest are counted. */
const NAMED_SEEDS = 3;

/**
 * Where `client` connects, for log lines: `127.0.0.1:6379`, a socket path, or a cluster's seed
 * nodes (`seeds`, else the nodes it knows: `10.0.0.1:7000,10.0.0.2:7000 and 4 more`). Never
 * credentials: only hosts and ports.
 */
export function redisAddress(
  client: Redis | Cluster,
  seeds?: readonly { readonly host: string; readonly port: number }[],
): string {
  if (client instanceof Cluster) {
    const nodes =
      seeds?.map((n) => `${n.host}:${n.port}`) ?? client.nodes('all').map((n) => `${n.options.host}:${n.options.port}`);
    if (nodes.length === 0) return 'Redis Cluster';
    const more = nodes.length > NAMED_SEEDS ? ` and ${nodes.length - NAMED_SEEDS} more` : '';
    return `${nodes.slice(0, NAMED_SEEDS).join(',')}${more}`;
  }
  const { host, port, path } = client.options;
  if (typeof path === 'string' && path !== '') return path;
  return `${host ?? 'localhost'}:${port ?? 6379}`;
}

/** True for an error reply of the Redis server (as opposed to a connection or client fault). */
export function isReplyError(error: unknown): error is Error {
  return error instanceof Error && error.name === 'ReplyError';
}

/** True for an error reply whose message starts with `prefix` (e.g. `NOSCRIPT`, `WRONGTYPE`). */
export function isReply(error: unknown, prefix: string): error is Error {
  return isReplyError(error) && error.message.startsWith(prefix);
}

/** A Lua script run by EVALSHA: its text and its SHA1 (computed, never written down). */
export interface PlainScript {
  readonly source: string;
  readonly sha: string;
}

/** The script of `source`, with its SHA1. */
export function plainScript(source: string): PlainScript {
  return Object.freeze({ source, sha: createHash('sha1').update(source).digest('hex') });
}

/**
 * Runs `script` by EVALSHA; a server that does not have it cached (a restart, SCRIPT FLUSH, a
 * new Cluster node) gets it by EVAL, which also caches it. Rejects with what ioredis rejected.
 */
export async function evalScript(
  client: Redis | Cluster,
  script: PlainScript,
  keys: readonly string[],
  args: readonly (string | Buffer | number)[],
): Promise<unknown> {
  try {
    return await client.evalsha(script.sha, keys.length, ...keys, ...args);
  } catch (error) {
    if (!isReply(error, 'NOSCRIPT')) throw error;
    return client.eval(script.source, keys.length, ...keys, ...args);
  }
}

let leadershipScript: PlainScript | undefined;

/** lua/leadership.lua, read once (lua/ is a sibling of both src/ and dist/). */
function leadership(): PlainScript {
  leadershipScript ??= plainScript(readFileSync(new URL('../lua/leadership.lua', import.meta.url), 'utf8'));
  return leadershipScript;
}

async function runLeadership(client: Redis | Cluster, key: string, owner: string, ttlMs: number): Promise<boolean> {
  const reply = await evalScript(client, leadership(), [key], ['1', owner, ttlMs]);
  if (reply !== 0 && reply !== 1) throw new Error(`the leadership script refused its arguments (reply ${String(reply)})`);
  return reply === 1;
}

/**
 * Takes the leadership `key` for `owner` (1..128 characters) when it is free, or extends it when
 * `owner` is the leader, for `ttlMs` (rounded up to a whole ms): true when `owner` leads
 * afterwards. One leadership per duty that one process at a time must do for the fleet (a
 * rollout's ramp, an adaptive limit's moves); a leader that stops renewing loses it when the TTL
 * ends.
 */
export function takeLeadership(client: Redis | Cluster, key: string, owner: string, ttlMs: number): Promise<boolean> {
  return runLeadership(client, key, owner, Math.max(1, Math.ceil(ttlMs)));
}

/** Resigns the leadership `key` when `owner` leads (so another can take it at once): true when it did. */
export function resignLeadership(client: Redis | Cluster, key: string, owner: string): Promise<boolean> {
  return runLeadership(client, key, owner, 0);
}
