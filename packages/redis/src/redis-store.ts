import {
  AdaptiveTimeout,
  bookedCap,
  type AdjustRequest,
  type BookRequest,
  type BookResult,
  type CancelRequest,
  type ConsumeRequest,
  type ConsumeResult,
  type LimitStore,
  type OutcomeStore,
  type OutcomeTotals,
  type TallyRead,
  type OutcomesRequest,
  type OutcomesResult,
  type PermitRequest,
} from '@sluice/core';
import type { Cluster, Redis } from 'ioredis';
import { readMemoryPolicy, type MemoryPolicy } from './memory-policy.js';
import { openConnection } from './connection.js';
import { redisAddress } from './kit.js';
import { Deadlines } from './deadlines.js';
import { toStoreError } from './errors.js';
import { slotOf, stateKey } from './keys.js';
import { compileRedisStoreOptions, type CompiledRedisStoreOptions, type RedisStoreOptions } from './options.js';
import { RedisPeerRegistry } from './peer-registry.js';
import type { BatchItem, ItemValue } from './items.js';
import { decodeReply, encodeBatch, type ReserveRequest, type ReserveResult } from './protocol.js';
import { batchScriptSource, ScriptRunner, type ScriptCall } from './scripts.js';
import { parseRedisTime } from './time.js';
import { decodeRead, decodeReport, encodeRead, encodeReport, outcomesScriptSource } from './outcomes.js';
import {
  concurrencyLimit,
  noConcurrencyLimit,
  notBookable,
  policyArg,
  storeBookingBounds,
  storeBookingId,
  storeBookingToken,
  storeCreate,
  storeCost,
  storeDelta,
  storeKey,
  storePermitId,
  storePermitTtl,
  storeHold,
  storeStamp,
  storeCoreShare,
  storeReserveBounds,
} from './validate.js';

/** A queue of at least this many calls is split when no call is in flight (see RedisStore#chunks). */
const SPLIT_AT = 16;

/**
 * How many script calls a queue to split goes as: four when its calls mostly name the key of the
 * call before them (a hot key: Redis' share is small), two otherwise (see RedisStore#chunks).
 */
function splitCount(queue: readonly Pending[]): number {
  let runs = 1;
  for (let i = 1; i < queue.length; i++) if (queue[i]!.item.stateKey !== queue[i - 1]!.item.stateKey) runs++;
  return runs * 4 <= queue.length ? 4 : 2;
}

interface Pending {
  readonly item: BatchItem;
  // The result type depends on the op; #dispatch hands each item what its op produces.
  readonly resolve: (value: never) => void;
  readonly reject: (error: Error) => void;
}

/**
 * A {@link LimitStore} in Redis or Redis Cluster. Every decision is made inside Redis by one Lua
 * program (lua/batch.lua, called as a Redis function, or as a script where there are none) on
 * Redis' clock, mirroring the core algorithms operation by operation, so Redis and the in-memory
 * store decide identically.
 *
 * Calls made in the same tick are coalesced into batches (per Cluster slot, see #chunks); one
 * call decides a whole batch, its items in arrival order, at one instant of Redis' clock.
 * Each call settles within the command timeout (adaptive by default, see
 * {@link RedisStoreOptions.commandTimeoutMs}), with a typed error when Redis is slow or
 * unreachable. Connection loss and return are reported to `watchConnection` listeners at once,
 * and a peer registry (`peers`) counts the processes sharing this Redis.
 *
 * Storage, per Sluice key `k` (all under one hash tag, see keys.ts):
 * `<prefix>{k}` the limit states, `<prefix>{k}:l` and `<prefix>{k}:c` held permits and
 * their costs; every key expires shortly after its state stops mattering.
 */
export class RedisStore implements LimitStore, OutcomeStore {
  readonly name = 'redis';
  /** Where the store connects (`127.0.0.1:6379`, a cluster's seed nodes), for log lines; no credentials. */
  readonly address: string;
  /** The compiled options, for inspection. */
  readonly options: CompiledRedisStoreOptions;
  readonly #client: Redis | Cluster;
  readonly #owned: boolean;
  readonly #cluster: boolean;
  readonly #runner: ScriptRunner;
  readonly #outcomes: ScriptRunner;
  #queue: Pending[] = [];
  #scheduled = false;
  #closed = false;
  #closing: Promise<void> | undefined;
  /** Script calls sent (or waiting for the connection) and not yet settled. */
  #inFlight = 0;
  /** Called when #inFlight drops to 0 (close() waits for that). */
  #drained: (() => void) | undefined;
  /** Dispatches waiting for the connection to become ready. */
  readonly #readyWaiters = new Set<() => void>();
  readonly #timeout: AdaptiveTimeout;
  /** The command timeouts of the calls in flight, on one timer. */
  readonly #deadlines = new Deadlines();
  readonly #watchers = new Set<(up: boolean, error?: unknown) => void>();
  /** The live processes sharing this Redis (undefined with `peerRegistry: false`). */
  readonly peers: RedisPeerRegistry | undefined;
  #lastError: unknown;

  constructor(options: RedisStoreOptions) {
    this.options = compileRedisStoreOptions(options);
    const connection = openConnection(this.options);
    this.#client = connection.client;
    this.address = redisAddress(
      connection.client,
      this.options.source.kind === 'cluster' ? this.options.source.nodes : undefined,
    );
    this.#runner = new ScriptRunner(connection.client, batchScriptSource());
    this.#outcomes = new ScriptRunner(connection.client, outcomesScriptSource());
    this.#owned = connection.owned;
    this.#cluster = connection.cluster;
    this.#timeout = new AdaptiveTimeout({
      ...(this.options.commandTimeoutMs === undefined ? {} : { fixedMs: this.options.commandTimeoutMs }),
      minMs: this.options.minCommandTimeoutMs,
      maxMs: this.options.maxCommandTimeoutMs,
    });
    this.#client.on('ready', this.#onReady);
    this.#client.on('close', this.#onClose);
    if (this.options.peerRegistry) {
      this.peers = new RedisPeerRegistry({
        client: this.#client,
        key: `${this.options.prefix}peers`,
        timeoutMs: this.options.commandTimeoutMs ?? this.options.maxCommandTimeoutMs,
      });
      this.peers.startInBackground();
    }
    if (this.#owned) {
      // Owning the client means owning its error events (ioredis logs unhandled ones).
      this.#client.on('error', this.#onError);
      this.#client.connect().catch(this.#onError);
    }
  }

  /**
   * The ioredis client the store talks through. The store bounds the calls it sends; a
   * connection it opened to a standalone Redis has no command timeout of its own, so bound what
   * you send on it yourself.
   */
  get client(): Redis | Cluster {
    return this.#client;
  }

  /** The command timeout the next call gets, in ms (fixed, or adapted to recent latency). */
  get commandTimeoutMs(): number {
    return this.#timeout.currentMs;
  }

  /** Reports connection loss (with its cause) and return as ioredis sees them. */
  watchConnection(listener: (up: boolean, error?: unknown) => void): () => void {
    this.#watchers.add(listener);
    return () => this.#watchers.delete(listener);
  }

  consume(request: ConsumeRequest): Promise<ConsumeResult> {
    return this.#submit(() => {
      const policy = policyArg(request.limits);
      const cost = storeCost(request.cost);
      const permitId = storePermitId(request.permitId ?? '');
      const coreShare = storeCoreShare(request.coreShare);
      return { op: 'consume', stateKey: this.#stateKey(request.key), limits: request.limits, policy, cost, permitId, coreShare };
    });
  }

  reserve(request: ReserveRequest): Promise<ReserveResult> {
    return this.#submit(() => {
      const policy = policyArg(request.limits);
      noConcurrencyLimit(request.limits);
      const [min, max] = storeReserveBounds(request.min, request.max);
      const holdMs = storeHold(request.holdMs);
      return { op: 'reserve', stateKey: this.#stateKey(request.key), limits: request.limits, policy, min, max, holdMs };
    });
  }

  adjust(request: AdjustRequest): Promise<void> {
    return this.#submit(() => {
      const policy = policyArg(request.limits);
      const delta = storeDelta(request.delta);
      const at = storeStamp(request.at);
      return { op: 'adjust', stateKey: this.#stateKey(request.key), limits: request.limits, policy, delta, at };
    });
  }

  renew(request: PermitRequest): Promise<boolean> {
    return this.#submit(() => {
      const policy = policyArg(request.limits);
      const ttlMs = storePermitTtl(request.ttlMs ?? concurrencyLimit(request.limits).permitTtlMs);
      const permitId = storePermitId(request.permitId);
      return { op: 'renew', stateKey: this.#stateKey(request.key), limits: request.limits, policy, permitId, ttlMs };
    });
  }

  release(request: PermitRequest): Promise<boolean> {
    return this.#submit(() => {
      const policy = policyArg(request.limits);
      concurrencyLimit(request.limits);
      const permitId = storePermitId(request.permitId);
      return { op: 'release', stateKey: this.#stateKey(request.key), limits: request.limits, policy, permitId };
    });
  }

  /**
   * Deferred admission (see `BookRequest`), decided in Redis exactly as the MemoryStore decides
   * it: admits now if the key has room, else books the earliest slot; with the id of a booking
   * held, claims it once due. The span comes back on Redis' clock, like `now`.
   */
  book(request: BookRequest): Promise<BookResult> {
    return this.#submit(() => {
      const policy = policyArg(request.limits);
      notBookable(request.limits);
      const cost = storeCost(request.cost);
      const id = storeBookingId(request.id);
      const create = storeCreate(request.create);
      const bounds = storeBookingBounds(request.bounds);
      const token = storeBookingToken(request.token);
      const maxBooked = bookedCap(request.limits, bounds);
      const stateKey = this.#stateKey(request.key);
      return { op: 'book', stateKey, limits: request.limits, policy, cost, id, create, bounds, maxBooked, token };
    });
  }

  /** Cancels a booking not yet claimed; true if it was held. */
  cancel(request: CancelRequest): Promise<boolean> {
    return this.#submit(() => {
      const policy = policyArg(request.limits);
      notBookable(request.limits);
      const token = storeBookingToken(request.token);
      const id = storeBookingId(request.id);
      return { op: 'cancel', stateKey: this.#stateKey(request.key), limits: request.limits, policy, id, token };
    });
  }

  /**
   * Adds a report to the resource's tallies (bucketed by Redis' clock) and, when it names a fleet
   * breaker, judges it and answers its state: one atomic script call (lua/outcomes.lua).
   */
  async outcomes(request: OutcomesRequest): Promise<OutcomesResult> {
    if (this.#closed) throw toStoreError({ kind: 'closed' });
    const call = encodeReport(this.options.prefix, request);
    return decodeReport(await this.#bounded(() => this.#outcomes.run(call)));
  }

  /** Tallies of `resource` (or of one cohort) over about the last `windowMs`, fleet-wide. */
  async outcomeTotals(resource: string, windowMs: number, cohort?: string, read?: TallyRead): Promise<OutcomeTotals> {
    if (this.#closed) throw toStoreError({ kind: 'closed' });
    const call = encodeRead(this.options.prefix, resource, windowMs, cohort, read);
    return decodeRead(await this.#bounded(() => this.#outcomes.run(call)));
  }

  /** Resolves when Redis answers a PING within the command timeout; rejects with a typed error. */
  async ping(): Promise<void> {
    if (this.#closed) throw toStoreError({ kind: 'closed' });
    await this.#bounded(() => this.#client.ping());
  }

  /** How each server holding keys bounds its memory (see {@link memoryPolicyProblem}); rejects when `CONFIG` is refused. */
  async memoryPolicy(): Promise<MemoryPolicy[]> {
    if (this.#closed) throw toStoreError({ kind: 'closed' });
    return this.#bounded(() => readMemoryPolicy(this.#client));
  }

  /**
   * Redis' clock (`TIME`, on the node that answers: any node of a Cluster), in epoch ms, within
   * the command timeout; rejects with a typed error. Every decision is made on this clock; the
   * clock-skew monitor reads it (see `redisTimeSource`).
   */
  async time(): Promise<number> {
    if (this.#closed) throw toStoreError({ kind: 'closed' });
    const reply = await this.#bounded(() => this.#client.time());
    return parseRedisTime(reply);
  }

  /**
   * Stops accepting calls, lets the calls already accepted finish (each within its timeout) and
   * closes the connection if the store opened it. Safe to call more than once.
   */
  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  /** The Redis name of a key's state (the key checked first). */
  #stateKey(key: string): string {
    return stateKey(this.options.prefix, storeKey(key));
  }

  #submit<I extends BatchItem>(build: () => I): Promise<ItemValue<I>> {
    if (this.#closed) return Promise.reject(toStoreError({ kind: 'closed' }));
    let item: I;
    try {
      item = build();
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    return new Promise<ItemValue<I>>((resolve, reject) => {
      this.#queue.push({ item, resolve, reject });
      if (!this.#scheduled) {
        this.#scheduled = true;
        // nextTick runs once the current microtasks have drained, so callers resumed by the
        // previous reply (each a chain of awaits) all join the next batch.
        process.nextTick(this.#flush);
      }
    });
  }

  readonly #flush = (): void => {
    this.#scheduled = false;
    const queue = this.#queue;
    if (queue.length === 0) return;
    this.#queue = [];
    for (const chunk of this.#chunks(queue)) this.#dispatch(chunk);
  };

  /**
   * Splits a queue into script calls: per Cluster slot, at most maxBatchSize items each, and when
   * no call is in flight and the queue holds at least SPLIT_AT calls, in two, or in four on a hot
   * key (splitCount). Then the callers of the first reply form the next call while Redis works on
   * the others: the calls take turns, and Node and Redis work at the same time instead of one
   * waiting for the other. Splitting every time would instead shrink the calls call after call.
   * On many keys Redis' share is large (a GET and a SET per key), so a third or fourth call costs
   * it more than the overlap gains (32 calls in flight on 100,000 keys: 0.82-0.88x the decisions per
   * second of two); on a hot key it is small, and four calls gain (16 to 32 in flight: 1.1-1.3x).
   * Below SPLIT_AT a second call costs the client more than the overlap saves (4 in flight: 0.9x
   * of one). Figures: docs/benchmarks.md.
   */
  #chunks(queue: Pending[]): Pending[][] {
    // A caller alone (the common case at low load) has nothing to group or split.
    if (queue.length === 1) return [queue];
    const groups: Pending[][] = [];
    if (this.#cluster) {
      const bySlot = new Map<number, Pending[]>();
      for (const p of queue) {
        const slot = slotOf(p.item.stateKey);
        const group = bySlot.get(slot);
        if (group) group.push(p);
        else bySlot.set(slot, [p]);
      }
      groups.push(...bySlot.values());
    } else {
      groups.push(queue);
    }
    const max = this.options.maxBatchSize;
    const idle = this.#inFlight === 0;
    const chunks: Pending[][] = [];
    for (const g of groups) {
      const count = Math.max(Math.ceil(g.length / max), idle && g.length >= SPLIT_AT ? splitCount(g) : 1);
      if (count === 1) {
        chunks.push(g);
        continue;
      }
      const size = Math.ceil(g.length / count);
      for (let i = 0; i < g.length; i += size) chunks.push(g.slice(i, i + size));
    }
    return chunks;
  }

  /** Sends one chunk as one script call and settles its items. */
  #dispatch(chunk: Pending[]): void {
    const items = chunk.map((p) => p.item);
    let call: ScriptCall;
    try {
      call = encodeBatch(items);
    } catch (error) {
      for (const p of chunk) p.reject(error as Error);
      return;
    }
    this.#inFlight++;
    this.#exchange<unknown>(
      (onReply, onError) => this.#runner.send(call, onReply, onError),
      (error, reply) => {
        if (--this.#inFlight === 0) this.#drained?.();
        let failure: Error | undefined = error;
        if (failure === undefined) {
          try {
            const outcomes = decodeReply(reply, items);
            for (let i = 0; i < chunk.length; i++) {
              const outcome = outcomes[i]!;
              if (outcome.ok) chunk[i]!.resolve(outcome.value as never);
              else chunk[i]!.reject(toStoreError(outcome.failure));
            }
            return;
          } catch (thrown) {
            // No item is left unsettled, and nothing escapes into the reply's promise.
            failure = thrown instanceof Error ? thrown : new Error(String(thrown));
          }
        }
        // A promise already settled ignores the rejection.
        for (const p of chunk) p.reject(failure);
      },
    );
  }

  /** {@link #exchange} for a call that gives a promise: settles as the exchange ends. */
  #bounded<T>(send: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#exchange<T>(
        (onValue, onError) => {
          try {
            send().then(onValue, onError);
          } catch (error) {
            onError(error);
          }
        },
        (error, value) => (error === undefined ? resolve(value as T) : reject(error)),
      );
    });
  }

  /**
   * Runs `send` once the connection is ready, and calls `done` exactly once, within one command
   * timeout from now whatever Redis does: with STORE_UNAVAILABLE if the connection did not
   * become ready in time, STORE_TIMEOUT if the reply did not come in time, a client error if
   * ioredis failed the call, else with no error and the reply. Callbacks rather than promises:
   * this is the path of every decision (see ScriptRunner.send).
   */
  #exchange<T>(
    send: (onValue: (value: T) => void, onError: (error: unknown) => void) => void,
    done: (error: Error | undefined, value?: T) => void,
  ): void {
    const budget = this.#timeout.currentMs;
    let finished = false;
    /** When the call was sent (performance.now()); -1 while it waits for the connection. */
    let sentAt = -1;
    const finish = (error: Error | undefined, value?: T): void => {
      if (finished) return;
      finished = true;
      this.#deadlines.cancel(deadline);
      if (sentAt < 0) this.#readyWaiters.delete(start);
      done(error, value);
    };
    const deadline = this.#deadlines.add(budget, () => {
      this.#timeout.timedOut(budget);
      finish(
        toStoreError(
          sentAt >= 0
            ? { kind: 'timeout', ms: budget }
            : { kind: 'not-ready', status: this.#client.status, cause: this.#lastError },
        ),
      );
    });
    const start = (): void => {
      if (finished || sentAt >= 0) return;
      sentAt = performance.now();
      send(
        (value) => {
          // Late replies count too: they are the latency Redis really has right now.
          this.#timeout.observe(performance.now() - sentAt, finished);
          finish(undefined, value);
        },
        (error) => finish(toStoreError({ kind: 'client', error })),
      );
    };
    const status = this.#client.status;
    if (status === 'ready') {
      start();
    } else if (status === 'end') {
      finish(toStoreError({ kind: 'not-ready', status, cause: this.#lastError }));
    } else {
      this.#readyWaiters.add(start);
      // A lazy client given to the store connects on its first command, which is not sent
      // before it is ready: connect it now, as that command would have.
      if (status === 'wait') this.#client.connect().catch(this.#onError);
    }
  }

  readonly #onReady = (): void => {
    // What failed before this connection is no reason for a later loss.
    this.#lastError = undefined;
    const waiters = [...this.#readyWaiters];
    this.#readyWaiters.clear();
    for (const w of waiters) w();
    if (this.#closed) return;
    // The count is what the fallback is sized by: read it as soon as Redis can be reached.
    if (this.peers?.known === false) this.peers.beatSoon();
    for (const w of this.#watchers) w(true);
  };

  readonly #onError = (error: unknown): void => {
    // connect() on a connection already under way says so: that is no fault of the connection.
    if (error instanceof Error && /already connecting|already connected/i.test(error.message)) return;
    this.#lastError = error;
  };

  readonly #onClose = (): void => {
    if (this.#closed) return;
    const error = toStoreError({ kind: 'closed-connection', cause: this.#lastError });
    for (const w of this.#watchers) w(false, error);
  };

  async #shutdown(): Promise<void> {
    this.#closed = true;
    this.#flush();
    while (this.#inFlight > 0) await new Promise<void>((resolve) => (this.#drained = resolve));
    this.#drained = undefined;
    this.#deadlines.clear();
    await this.peers?.close();
    this.#client.off('ready', this.#onReady);
    this.#client.off('close', this.#onClose);
    this.#watchers.clear();
    if (this.#owned) await closeClient(this.#client, this.#timeout.currentMs);
  }
}

/**
 * Ends a client the store opened: QUIT when connected (Redis answers the commands before it),
 * then waits (bounded) for the socket to close so no handle outlives the store. The bound covers
 * the QUIT too: the connection has no command timeout of its own, and a Redis that stopped
 * answering never answers it.
 */
async function closeClient(client: Redis | Cluster, boundMs: number): Promise<void> {
  if (client.status === 'end') return;
  const ended = new Promise<void>((resolve) => client.once('end', resolve));
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<void>((resolve) => (timer = setTimeout(resolve, boundMs)));
  if (client.status === 'ready') {
    client.quit().then(undefined, () => client.disconnect());
  } else {
    client.disconnect();
  }
  await Promise.race([ended, bound]);
  clearTimeout(timer);
  if ((client.status as string) !== 'end') client.disconnect();
}
