import { randomUUID } from 'node:crypto';
import { ErrorCodes, SluiceError, type PeerCount } from '@sluice/core';
import type { Cluster, Redis } from 'ioredis';
import { loadScript, ScriptRunner, type LuaScript } from './scripts.js';

/** Options of {@link RedisPeerRegistry}. */
export interface RedisPeerRegistryOptions {
  /** The connection to heartbeat through (not closed by the registry). */
  client: Redis | Cluster;
  /** The registry's key; clients sharing limits must use the same one. @default 'sluice:peers' */
  key?: string;
  /** This client's id. @default a random UUID */
  id?: string;
  /** How often this client announces itself, in ms. @default 1000 */
  heartbeatMs?: number;
  /** A client missing heartbeats for this long no longer counts, in ms. @default 3 * heartbeatMs */
  ttlMs?: number;
  /**
   * Bound on one heartbeat (or leave), in ms: past it the call counts as failed, whatever the
   * client's own timeouts are. @default heartbeatMs
   */
  timeoutMs?: number;
}

let peersScript: LuaScript | undefined;

/**
 * The live clients sharing a store, kept in Redis: each client heartbeats into a sorted set and
 * reads how many heartbeated recently. A {@link RedisStore} keeps one by default (its `peers`),
 * which is what a limiter's fallback is sized by; create one yourself only for a client the
 * store does not own the count of. `count` is the last value read, so it stays available
 * (and unchanged) while Redis is down: exactly what sizing a local fallback to a fair share
 * needs. Used as `failover.peers` of a Limiter.
 *
 * @example
 * const peers = new RedisPeerRegistry({ client: redis });
 * await peers.start();
 * const limiter = new Limiter({ store, failover: { peers }, resources });
 * // ... on shutdown: await limiter.close(); await peers.close();
 */
export class RedisPeerRegistry implements PeerCount {
  readonly id: string;
  readonly #runner: ScriptRunner;
  readonly #key: string;
  readonly #heartbeatMs: number;
  readonly #ttlMs: number;
  readonly #timeoutMs: number;
  #count = 1;
  #known = false;
  #timer: NodeJS.Timeout | undefined;
  #beat: Promise<void> | undefined;
  #closed = false;

  constructor(options: RedisPeerRegistryOptions) {
    this.#key = options.key ?? 'sluice:peers';
    this.id = options.id ?? randomUUID();
    this.#heartbeatMs = options.heartbeatMs ?? 1000;
    this.#ttlMs = options.ttlMs ?? 3 * this.#heartbeatMs;
    this.#timeoutMs = options.timeoutMs ?? this.#heartbeatMs;
    if (
      !Number.isInteger(this.#heartbeatMs) ||
      this.#heartbeatMs < 10 ||
      !Number.isInteger(this.#ttlMs) ||
      this.#ttlMs <= this.#heartbeatMs
    ) {
      throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'heartbeatMs must be an integer >= 10 and ttlMs larger than it', {
        field: 'heartbeatMs',
      });
    }
    if (!Number.isInteger(this.#timeoutMs) || this.#timeoutMs < 1) {
      throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'timeoutMs must be a positive integer', { field: 'timeoutMs' });
    }
    peersScript ??= loadScript('peers.lua', 'peers');
    this.#runner = new ScriptRunner(options.client, peersScript);
  }

  /** Live clients as last seen (at least 1: this one). */
  get count(): number {
    return this.#count;
  }

  /** False until a heartbeat has been answered once (the count is then a guess). */
  get known(): boolean {
    return this.#known;
  }

  /** Announces this client and starts heartbeating. Rejects if Redis cannot be reached. */
  async start(): Promise<void> {
    await this.#heartbeat(true);
    this.#schedule();
  }

  /**
   * Starts heartbeating without waiting: the first heartbeat is sent now, and a Redis that
   * cannot be reached is retried every `heartbeatMs` (until then `known` stays false).
   * The store that owns a registry starts it this way; `close()` stops it.
   */
  startInBackground(): void {
    if (this.#closed || this.#beat !== undefined || this.#timer !== undefined) return;
    this.#beat = this.#heartbeat(false).finally(() => {
      this.#beat = undefined;
      this.#schedule();
    });
  }

  /** Heartbeats now rather than at the next tick (the connection just became ready). */
  beatSoon(): void {
    if (this.#closed || this.#beat !== undefined || this.#timer === undefined) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.startInBackground();
  }

  /** Stops heartbeating and leaves the registry (best effort). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    await this.#beat;
    if (!this.#known) return;
    await this.#call('leave').catch(() => undefined);
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => {
      this.#beat = this.#heartbeat(false).finally(() => {
        this.#beat = undefined;
        this.#schedule();
      });
    }, this.#heartbeatMs);
    this.#timer.unref();
  }

  async #heartbeat(strict: boolean): Promise<void> {
    try {
      this.#count = Math.max(1, await this.#call('beat'));
      this.#known = true;
    } catch (err) {
      // While Redis is away the last count stays: that is what the fallback is sized by.
      if (strict) throw err;
    }
  }

  async #call(op: 'beat' | 'leave'): Promise<number> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no reply within ${this.#timeoutMs} ms`)), this.#timeoutMs);
    });
    try {
      const reply = this.#runner.run({ keys: [this.#key], args: [this.id, String(this.#ttlMs), op] });
      return Number(await Promise.race([reply, late]));
    } catch (error) {
      throw new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'peer registry heartbeat failed', { cause: error });
    } finally {
      clearTimeout(timer);
    }
  }
}
