import { readFileSync } from 'node:fs';
import type { Logger } from '@sluice/core';
import { evalScript, isReply, openRedisClient, plainScript, redisAddress, type PlainScript } from '@sluice/redis/kit';
import { Cluster, Redis } from 'ioredis';
import { z } from 'zod';
import { RulesError, storeUnavailable } from '../errors.js';
import {
  DEFAULT_MAX_VERSIONS,
  VersionCache,
  checkLimit,
  checkVersion,
  closed,
  compileOptions,
  conflict,
  corrupt,
  diffVersions,
  metaOf,
  notFound,
  prepareChange,
  storedMetaSchema,
  toRuleVersion,
  type Change,
} from './common.js';
import type {
  ApplyOptions,
  HistoryOptions,
  RollbackOptions,
  RuleDiff,
  RuleListener,
  RuleStore,
  RuleVersion,
  RuleVersionMeta,
} from './types.js';
import { RedisRolloutStore } from '../rollout/redis.js';
import type { RolloutStore } from '../rollout/store.js';
import { RuleStoreHealth } from './health.js';
import { VersionWatch } from './watch.js';

/** A Redis Cluster seed node: `"host:port"` or `{ host, port }`. */
export type RuleClusterSeed = string | { readonly host: string; readonly port: number };

/** Options of {@link RedisRuleStore}. Give exactly one of `client`, `url` and `clusterNodes`. */
export interface RedisRuleStoreOptions {
  /** An ioredis `Redis` or `Cluster` client; the store does not close it. */
  client?: Redis | Cluster;
  /** A Redis URL; the store connects and owns the connection. */
  url?: string;
  /** Redis Cluster seed nodes; the store connects and owns the cluster client. */
  clusterNodes?: readonly RuleClusterSeed[];
  /**
   * Prefix of every key and of the channel; all of them share the hash tag `{rules}` (or the
   * prefix's own, if it has one), so they live on one Cluster slot.
   * @default 'sluice:'
   */
  prefix?: string;
  /**
   * Versions kept; older ones are deleted.
   * @default 1000
   */
  maxVersions?: number;
  /**
   * How often watchers check the current version besides change notifications, in ms.
   * @default 1000
   */
  pollIntervalMs?: number;
  /**
   * Timeout of each command on connections the store opens, in ms.
   * @default 5000
   */
  commandTimeoutMs?: number;
  /**
   * Where the store's unavailability is reported (one line when it stops answering, one when it
   * answers again), and listeners that throw.
   */
  logger?: Logger;
}

const seed = z.union([
  z.string().regex(/^[^:]+:\d+$/, 'must be "host:port"'),
  z.strictObject({ host: z.string().min(1), port: z.number().int().min(1).max(65_535) }),
]);

const optionsSchema = z
  .strictObject({
    client: z.custom<Redis | Cluster>((c) => c instanceof Redis || c instanceof Cluster, 'must be an ioredis client').optional(),
    url: z.string().min(1).optional(),
    clusterNodes: z.array(seed).min(1, 'must name at least one node').optional(),
    prefix: z.string().max(128, 'must be at most 128 characters').default('sluice:'),
    maxVersions: z.number().int('must be an integer').min(1).max(100_000).default(DEFAULT_MAX_VERSIONS),
    pollIntervalMs: z.number().int('must be an integer').min(10).max(60_000).default(1000),
    commandTimeoutMs: z.number().int('must be an integer').min(1).max(600_000).default(5000),
    logger: z.custom<Logger>((l) => typeof l === 'object' && l !== null, 'must be a logger').optional(),
  })
  .refine((o) => [o.client, o.url, o.clusterNodes].filter((x) => x !== undefined).length === 1, {
    error: 'give exactly one of client, url and clusterNodes',
  });

/** The apply script (`lua/apply.lua`), its SHA computed from its text. */
let applyScript: (PlainScript & { readonly name: string }) | undefined;

function script(): PlainScript & { readonly name: string } {
  if (!applyScript) {
    // lua/ is a sibling of both src/ and dist/.
    const source = readFileSync(new URL('../../lua/apply.lua', import.meta.url), 'utf8');
    applyScript = Object.freeze({ name: 'sluice:rules-apply:v1', ...plainScript(source) });
  }
  return applyScript;
}

/** A Cluster seed as `host:port` or `{ host, port }`. */
function seedNode(s: string | { host: string; port: number }): { host: string; port: number } {
  if (typeof s !== 'string') return { host: s.host, port: s.port };
  const [host, port] = s.split(':');
  return { host: host!, port: Number(port) };
}

/** The one place where Redis failures become rules errors. */
function storeError(what: string, e: unknown): RulesError {
  if (isReply(e, 'WRONGTYPE')) {
    return corrupt(`${what}: a rule key holds data of another type; is the prefix shared with another application?`, e);
  }
  return storeUnavailable(what, e);
}

const recordSchema = storedMetaSchema.omit({ createdAt: true }).extend({ createdAtMs: z.number().int().min(0) });

/**
 * A rule store in Redis or Redis Cluster. A change is one script call (`lua/apply.lua`) that
 * checks the expected version, numbers the change, stamps it with Redis' time, stores it,
 * prunes the oldest and publishes the new number. Watchers hear of changes by pub/sub and
 * poll every `pollIntervalMs` in case a message was missed.
 *
 * @example
 * const store = new RedisRuleStore({ url: 'redis://127.0.0.1:6379', prefix: 'sluice:' });
 * const stop = store.watch((v) => apply(v.ruleSet));
 */
export class RedisRuleStore implements RuleStore {
  readonly #client: Redis | Cluster;
  readonly #owned: boolean;
  readonly #options: z.output<typeof optionsSchema>;
  readonly #keys: { seq: string; current: string; meta: string; source: string; index: string; channel: string };
  readonly #base: string;
  #rollouts: RedisRolloutStore | undefined;
  readonly #cache = new VersionCache();
  readonly #watch: VersionWatch;
  #subscriber: Redis | Cluster | undefined;
  #subscribed: Promise<unknown> | undefined;
  readonly #health: RuleStoreHealth;
  #closed = false;

  constructor(options: RedisRuleStoreOptions) {
    const o = compileOptions(optionsSchema, options, 'options');
    this.#options = o;
    if (o.client) {
      this.#client = o.client;
      this.#owned = false;
    } else {
      this.#client = openRedisClient({
        ...(o.url !== undefined ? { url: o.url } : { clusterNodes: o.clusterNodes!.map(seedNode) }),
        connectTimeoutMs: o.commandTimeoutMs,
        commandTimeoutMs: o.commandTimeoutMs,
        offlineQueue: true,
        // A change sent but unanswered before a disconnect must not be sent again: it would
        // record the same change twice.
        resend: false,
        maxRetriesPerRequest: 1,
        // Every reconnect attempt fails alike while Redis is away: one spell, not a line each.
        onError: (err: unknown) => this.#health.failed(err),
      });
      this.#owned = true;
      this.#client.on('ready', () => this.#health.answered());
    }
    const seeds = o.clusterNodes?.map(seedNode);
    this.#health = new RuleStoreHealth(o.logger, `rule store redis at ${redisAddress(this.#client, seeds)}`);
    const base = /\{[^}]*\}/.test(o.prefix) ? o.prefix : `${o.prefix}{rules}:`;
    this.#base = base;
    this.#keys = {
      seq: `${base}seq`,
      current: `${base}current`,
      meta: `${base}meta`,
      source: `${base}source`,
      index: `${base}index`,
      channel: `${base}changes`,
    };
    this.#watch = new VersionWatch(
      { readCurrent: () => this.#readCurrent(), load: (v) => this.get(v) },
      o.pollIntervalMs,
      this.#health,
      o.logger,
    );
  }

  async current(): Promise<RuleVersion | undefined> {
    this.#open();
    const v = await this.#readCurrent();
    return v === 0 ? undefined : this.get(v);
  }

  async apply(text: string, options: ApplyOptions): Promise<RuleVersion> {
    this.#open();
    return this.#commit(await prepareChange(text, options));
  }

  async rollback(version: number, options: RollbackOptions): Promise<RuleVersion> {
    this.#open();
    const old = await this.get(checkVersion(version));
    return this.#commit(await prepareChange(old.source, { ...options, file: old.file }, old.version));
  }

  async get(version: number): Promise<RuleVersion> {
    this.#open();
    checkVersion(version);
    const cached = this.#cache.get(version);
    if (cached) return cached;
    const field = String(version);
    let raw: [string | null, string | null];
    try {
      const [meta, source] = await Promise.all([
        this.#client.hget(this.#keys.meta, field),
        this.#client.hget(this.#keys.source, field),
      ]);
      raw = [meta, source];
    } catch (e) {
      throw storeError(`read version ${version}`, e);
    }
    if (raw[0] === null || raw[1] === null) throw notFound(version);
    const v = await toRuleVersion(this.#parseMeta(raw[0], version), raw[1]);
    this.#cache.set(v);
    return v;
  }

  async history(options: HistoryOptions = {}): Promise<RuleVersionMeta[]> {
    this.#open();
    const limit = checkLimit(options.limit, this.#options.maxVersions);
    let records: (string | null)[];
    try {
      const versions = await this.#client.zrevrange(this.#keys.index, 0, limit - 1);
      if (versions.length === 0) return [];
      records = await this.#client.hmget(this.#keys.meta, ...versions);
    } catch (e) {
      throw storeError('read the history', e);
    }
    // A version pruned between the two reads is left out.
    return records.filter((r): r is string => r !== null).map((r) => this.#parseMeta(r));
  }

  async diff(from: number, to: number): Promise<RuleDiff> {
    this.#open();
    return diffVersions(await this.get(checkVersion(from, 'from')), await this.get(checkVersion(to, 'to')));
  }

  watch(listener: RuleListener): () => void {
    this.#open();
    this.#subscribe();
    return this.#watch.add(listener);
  }

  /** The rollout kept under this store's prefix, on its connection. */
  rolloutStore(): RolloutStore {
    this.#open();
    this.#rollouts ??= new RedisRolloutStore(this.#client, this.#base, this.#health);
    return this.#rollouts;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#watch.close();
    await this.#subscribed?.catch(() => undefined);
    this.#subscriber?.disconnect();
    this.#health.close();
    if (this.#owned) {
      await this.#client.quit().catch(() => this.#client.disconnect());
    }
  }

  #open(): void {
    if (this.#closed) throw closed();
  }

  async #commit(change: Change): Promise<RuleVersion> {
    const record = {
      author: change.author,
      reason: change.reason,
      hash: change.ruleSet.hash,
      file: change.file,
      ...(change.rolledBackFrom === undefined ? {} : { rolledBackFrom: change.rolledBackFrom }),
    };
    const k = this.#keys;
    const keys = [k.seq, k.current, k.meta, k.source, k.index];
    const args = [
      '1',
      change.expectedVersion === undefined ? '' : String(change.expectedVersion),
      JSON.stringify(record),
      change.source,
      String(this.#options.maxVersions),
      k.channel,
    ];
    const reply = await this.#eval(keys, args);
    if (!Array.isArray(reply) || typeof reply[0] !== 'number') throw corrupt(`unexpected reply from ${script().name}`);
    const [code, a, b] = reply as [number, unknown, unknown];
    if (code === 1) throw conflict(change.expectedVersion!, Number(a));
    if (code !== 0 || typeof a !== 'number' || typeof b !== 'number') {
      throw corrupt(`${script().name} refused the change: ${String(a)}`);
    }
    const v: RuleVersion = Object.freeze({
      ...metaOf({ ...record, version: a, createdAt: new Date(b).toISOString() }),
      source: change.source,
      ruleSet: change.ruleSet,
    });
    this.#cache.set(v);
    this.#cache.dropBelow(a - this.#options.maxVersions + 1);
    this.#watch.kick();
    return v;
  }

  /** EVALSHA, falling back to EVAL when the server does not have the script cached. */
  async #eval(keys: string[], args: string[]): Promise<unknown> {
    try {
      return await evalScript(this.#client, script(), keys, args);
    } catch (e) {
      throw storeError('record the change', e);
    }
  }

  async #readCurrent(): Promise<number> {
    let raw: string | null;
    try {
      raw = await this.#client.get(this.#keys.current);
    } catch (e) {
      throw storeError('read the current version', e);
    }
    if (raw === null) return 0;
    const v = Number(raw);
    if (!Number.isSafeInteger(v) || v < 1) throw corrupt(`${this.#keys.current} holds ${JSON.stringify(raw)}`);
    return v;
  }

  #parseMeta(raw: string, version?: number): RuleVersionMeta {
    try {
      const { createdAtMs, ...rest } = recordSchema.parse(JSON.parse(raw));
      if (version !== undefined && rest.version !== version) throw new Error(`it records version ${rest.version}`);
      return metaOf({ ...rest, createdAt: new Date(createdAtMs).toISOString() });
    } catch (e) {
      throw corrupt(`the record of version ${version ?? '?'} is not readable`, e);
    }
  }

  /** Subscribes once, on the first watcher; ioredis re-subscribes after reconnects. */
  #subscribe(): void {
    if (this.#subscriber) return;
    const sub = this.#client.duplicate();
    this.#subscriber = sub;
    // Changes are polled for meanwhile; ioredis subscribes again once it reconnects. The store's
    // own connection and polls tell whether Redis is away: the subscriber's errors are counted.
    sub.on('error', (err: unknown) => this.#health.repeat(err));
    sub.on('message', (channel: string) => {
      if (channel === this.#keys.channel) this.#watch.kick();
    });
    this.#subscribed = sub.subscribe(this.#keys.channel).then(
      // A change made while subscribing would otherwise wait for the next poll.
      () => this.#watch.kick(),
      (err: unknown) => this.#health.failed(err),
    );
  }
}
