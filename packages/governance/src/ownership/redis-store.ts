import { readFileSync } from 'node:fs';
import { ErrorCodes, invalid } from '@sluice/core';
import { evalScript, openRedisClient, plainScript, type PlainScript } from '@sluice/redis/kit';
import type { Cluster, Redis } from 'ioredis';
import { StreamError, StreamErrorCodes } from '@sluice/stream';
import { MAX_OWNER_LENGTH, type OwnershipStore } from './store.js';

/** Options of {@link RedisOwnershipStore}: give exactly one of `client` and `url`. */
export interface RedisOwnershipStoreOptions {
  /** A connected client (standalone or Cluster) the store uses and does not close. */
  client?: Redis | Cluster;
  /** A Redis URL; the store opens (and closes) its own connection. */
  url?: string;
  /**
   * Prefix of every key. Each partition's keys share a hash tag, so the store works on Redis
   * Cluster.
   * @default 'sluice:agg:'
   */
  prefix?: string;
  /** Command timeout of a connection the store opens, in ms. @default 1000 */
  commandTimeoutMs?: number;
}

let ownershipScript: PlainScript | undefined;

function script(): PlainScript {
  if (!ownershipScript) {
    // lua/ is a sibling of both src/ and dist/ (two levels up from src/ownership/).
    const source = readFileSync(new URL('../../lua/ownership.lua', import.meta.url), 'utf8');
    ownershipScript = plainScript(source);
  }
  return ownershipScript;
}

/** The one place where Redis failures of the ownership store become stream errors. */
function unavailable(what: string, e: unknown): StreamError {
  if (e instanceof StreamError) return e;
  const message = e instanceof Error ? e.message : String(e);
  return new StreamError(StreamErrorCodes.OWNERSHIP_UNAVAILABLE, `the ownership store cannot ${what}: ${message}`, { cause: e });
}

function checkOwner(owner: string): void {
  if (typeof owner !== 'string' || owner.length < 1 || owner.length > MAX_OWNER_LENGTH) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'owner', `must be 1..${MAX_OWNER_LENGTH} characters`);
  }
}

/**
 * Partition ownership in Redis: a partition's owner is a key holding the owner's id with a TTL,
 * taken with `SET NX PX`; renewals, releases and snapshot writes compare the owner first, in
 * `lua/ownership.lua` (EVALSHA, EVAL when the server does not have it cached). Snapshots are
 * written only by the partition's owner.
 *
 * | key                              | type   | content                                 |
 * | -------------------------------- | ------ | --------------------------------------- |
 * | `<prefix>{p<n>}:lease`           | STRING | the owner of partition n, with a TTL    |
 * | `<prefix>{p<n>}:snapshot`        | STRING | partition n's window snapshot, with TTL |
 * | `<prefix>{members}`              | ZSET   | live aggregators, scored by expiry (ms) |
 *
 * The owner key keeps its `:lease` suffix from 0.1, so aggregators of both versions share one
 * Redis during a rolling deploy without taking the same partition twice.
 */
export class RedisOwnershipStore implements OwnershipStore {
  /** Shared by every aggregator on the same Redis and prefix. */
  readonly kind = 'redis';
  readonly #client: Redis | Cluster;
  readonly #owned: boolean;
  readonly #prefix: string;
  #closed = false;

  constructor(options: RedisOwnershipStoreOptions) {
    if ((options.client === undefined) === (options.url === undefined)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'client', 'give exactly one of client and url');
    }
    this.#prefix = options.prefix ?? 'sluice:agg:';
    if (options.client !== undefined) {
      this.#client = options.client;
      this.#owned = false;
    } else {
      const timeoutMs = options.commandTimeoutMs ?? 1000;
      this.#client = openRedisClient({
        url: options.url!,
        connectTimeoutMs: timeoutMs,
        commandTimeoutMs: timeoutMs,
        offlineQueue: true,
        // An ownership command resent after a reconnect could renew one that changed hands.
        resend: false,
        maxRetriesPerRequest: 1,
        // Failures surface on the calls; the client reconnects by itself.
        onError: () => undefined,
      });
      this.#owned = true;
    }
  }

  #owner(partition: number): string {
    return `${this.#prefix}{p${partition}}:lease`;
  }

  #snapshot(partition: number): string {
    return `${this.#prefix}{p${partition}}:snapshot`;
  }

  #members(): string {
    return `${this.#prefix}{members}`;
  }

  async #eval(what: string, keys: string[], args: (string | Buffer)[]): Promise<number> {
    let reply: unknown;
    try {
      reply = await evalScript(this.#client, script(), keys, ['1', ...args]);
    } catch (e) {
      throw unavailable(what, e);
    }
    if (typeof reply !== 'number' || reply < 0) {
      throw new StreamError(
        StreamErrorCodes.OWNERSHIP_UNAVAILABLE,
        `the ownership script refused to ${what} (reply ${String(reply)})`,
      );
    }
    return reply;
  }

  async acquire(partition: number, owner: string, ttlMs: number): Promise<boolean> {
    checkOwner(owner);
    const key = this.#owner(partition);
    try {
      const set = await this.#client.set(key, owner, 'PX', ttlMs, 'NX');
      if (set === 'OK') return true;
    } catch (e) {
      throw unavailable(`take ownership of partition ${partition}`, e);
    }
    return this.renew(partition, owner, ttlMs);
  }

  async renew(partition: number, owner: string, ttlMs: number): Promise<boolean> {
    checkOwner(owner);
    const key = this.#owner(partition);
    return (await this.#eval(`renew ownership of partition ${partition}`, [key], ['renew', owner, String(ttlMs)])) === 1;
  }

  async release(partition: number, owner: string): Promise<void> {
    checkOwner(owner);
    await this.#eval(`release ownership of partition ${partition}`, [this.#owner(partition)], ['release', owner, '0']);
  }

  heartbeat(owner: string, ttlMs: number): Promise<number> {
    checkOwner(owner);
    return this.#eval('record a live member', [this.#members()], ['members', owner, String(ttlMs)]);
  }

  async leave(owner: string): Promise<void> {
    checkOwner(owner);
    await this.#eval('remove a member', [this.#members()], ['leave', owner, '0']);
  }

  async saveSnapshot(partition: number, owner: string, snapshot: Uint8Array, ttlMs: number): Promise<boolean> {
    checkOwner(owner);
    const keys = [this.#owner(partition), this.#snapshot(partition)];
    const bytes = Buffer.from(snapshot.buffer, snapshot.byteOffset, snapshot.byteLength);
    return (await this.#eval(`save the snapshot of partition ${partition}`, keys, ['save', owner, String(ttlMs), bytes])) === 1;
  }

  async loadSnapshot(partition: number): Promise<Uint8Array | undefined> {
    try {
      const b = await this.#client.getBuffer(this.#snapshot(partition));
      return b === null ? undefined : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    } catch (e) {
      throw unavailable(`read the snapshot of partition ${partition}`, e);
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#owned) {
      try {
        await this.#client.quit();
      } catch {
        this.#client.disconnect();
      }
    }
  }
}
