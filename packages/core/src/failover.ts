import type { Clock, TimerHandle } from './clock.js';
import { ErrorCodes, SluiceError, invalid } from './errors.js';
import { FailureStreak } from './failure-streak.js';
import { resolveLogger, type Logger } from './log.js';
import { MemoryStore } from './memory-store.js';
import { unjudgedStatuses } from './decision.js';
import type { CompiledLimit } from './policy.js';
export type { Logger } from './log.js';
export type { PeerCount } from './store.js';
import type {
  BookRequest,
  BookResult,
  CancelRequest,
  ConsumeRequest,
  ConsumeResult,
  LeaseRequest,
  LimitStore,
  PeerCount,
  ReserveRequest,
  ReserveResult,
} from './store.js';

/**
 * What a resource does while its store is unavailable:
 * - `local`: decide on an in-process limiter sized to a fair share of the global limit
 *   (limit / live clients), so the fleet as a whole stays near the global limit;
 * - `open`: admit everything (the downstream matters less than availability);
 * - `closed`: deny everything (the downstream must never be overrun).
 */
export type StoreFailurePolicy = 'local' | 'open' | 'closed';

export const STORE_FAILURE_POLICIES: readonly StoreFailurePolicy[] = ['local', 'open', 'closed'];

/** Options of {@link Failover}. */
export interface FailoverOptions {
  /**
   * Live clients sharing the store: a registry, or a fixed number.
   * @default the store's own count (`store.peers`, kept by the Redis store), else 1 (a store
   * that only this process uses, such as the in-memory one)
   */
  peers?: PeerCount | number;
  /**
   * Consecutive timed-out calls that switch to the fallback (calls in flight together count
   * once). Each timed-out call is answered by its policy either way; this only decides when to
   * stop asking the store. Connection loss switches at once.
   * @default 3
   */
  consecutiveFailures?: number;
  /** First health probe after a failure, in ms; probes back off to `maxProbeIntervalMs`. @default 50 */
  probeIntervalMs?: number;
  /** @default 500 (the store's return is noticed within this) */
  maxProbeIntervalMs?: number;
  /** Where switches are logged; `false` for nowhere. @default JSON lines on stderr */
  logger?: Logger | false;
  /** Called on every switch between the store and the fallback. */
  onSwitch?: (event: { healthy: boolean; error?: unknown }) => void;
}

/** True for faults that mean "the store is away", as opposed to bad input. */
export function isStoreFailure(err: unknown): boolean {
  return err instanceof SluiceError && (err.code === ErrorCodes.STORE_TIMEOUT || err.code === ErrorCodes.STORE_UNAVAILABLE);
}

/** True when the store is unreachable (not merely slow): the fallback starts at once. */
function isConnectionLoss(err: unknown): boolean {
  return err instanceof SluiceError && err.code === ErrorCodes.STORE_UNAVAILABLE;
}

const LOCAL_LEASE_PREFIX = 'local:';

/**
 * What {@link Failover.consume} answers: the store's result as it is, or the fallback's marked
 * `fallback: true` (`unavailable`: denied for want of the store, not by a local share).
 */
export type FailoverResult = ConsumeResult & { readonly fallback?: true; readonly unavailable?: boolean };

/**
 * Guards a store: while it answers, calls go to it. A call that fails (timed out, unreachable)
 * is answered by its resource's {@link StoreFailurePolicy} (`local` denies such a call until
 * the switch: the process's global admissions are its share until then). The guard marks the store down at
 * once on connection loss (the store's own report, or a failed call of a store that does not
 * report its connection), or after `consecutiveFailures` failed calls in a row, so one slow reply under load does not switch a
 * whole process to its local share. While down, every call is answered by its policy at once
 * (nothing queues) and the store is probed in the background (with backoff) until it answers.
 */
export class Failover {
  readonly #primary: LimitStore;
  readonly #clock: Clock;
  readonly #fallback: MemoryStore;
  readonly #peers: PeerCount;
  readonly #probeMs: number;
  readonly #maxProbeMs: number;
  readonly #logger: Logger | undefined;
  readonly #onSwitch: FailoverOptions['onSwitch'];
  readonly #streak: FailureStreak;
  readonly #unwatch: (() => void) | undefined;
  readonly #scaled = new WeakMap<readonly CompiledLimit[], { peers: number; limits: readonly CompiledLimit[] }>();
  #healthy = true;
  #probeTimer: TimerHandle | undefined;
  #probe: Promise<void> | undefined;
  #closed = false;

  constructor(primary: LimitStore, clock: Clock, options: FailoverOptions = {}) {
    this.#primary = primary;
    this.#clock = clock;
    this.#fallback = new MemoryStore({ clock });
    const peers = options.peers ?? primary.peers ?? 1;
    if (typeof peers === 'number' && (!Number.isInteger(peers) || peers < 1)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'failover.peers', 'must be an integer >= 1 or a PeerCount');
    }
    this.#peers = typeof peers === 'number' ? { count: peers } : peers;
    this.#probeMs = options.probeIntervalMs ?? 50;
    this.#maxProbeMs = options.maxProbeIntervalMs ?? 500;
    const threshold = options.consecutiveFailures ?? 3;
    if (!Number.isInteger(threshold) || threshold < 1 || threshold > 1000) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'failover.consecutiveFailures', 'must be an integer between 1 and 1000');
    }
    this.#streak = new FailureStreak(threshold);
    this.#logger = resolveLogger(options.logger);
    this.#onSwitch = options.onSwitch;
    this.#unwatch = primary.watchConnection?.((up, error) => (up ? this.#probeNow() : this.#markDown(error)));
  }

  /** False while the store is considered down. */
  get healthy(): boolean {
    return this.#healthy;
  }

  /**
   * Decides on the store, or by `policy` while it is down. `fallback` tells which one answered;
   * `unavailable` that the call was denied for want of the store (not by a local share).
   */
  consume(request: ConsumeRequest, policy: StoreFailurePolicy): Promise<FailoverResult> {
    if (!this.#healthy) return this.#fallbackResult(request, policy);
    // One reaction on the store's promise, no async frame: this is every decision's path.
    const ticket = this.#streak.begin();
    let pending: Promise<ConsumeResult>;
    try {
      pending = this.#primary.consume(request);
    } catch (err) {
      pending = Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    return pending.then(
      (result): FailoverResult => {
        this.#streak.succeeded();
        // Passed on as it is: a copy per decision showed in profiles.
        return result;
      },
      (err: unknown) => {
        this.#failed(err, ticket);
        return this.#fallbackResult(request, policy);
      },
    );
  }

  async #fallbackResult(request: ConsumeRequest, policy: StoreFailurePolicy): Promise<FailoverResult> {
    const answer = this.#answering(policy);
    const result = await this.#fallbackConsume(request, answer);
    const unavailable = answer === 'closed' || (answer === 'local' && this.#peers.known === false);
    return { ...result, fallback: true as const, unavailable };
  }

  /** Reserves on the store, or by `policy` while it is down (`open` grants `max`). */
  async reserve(request: ReserveRequest, policy: StoreFailurePolicy): Promise<ReserveResult & { fallback: boolean }> {
    if (this.#healthy) {
      const ticket = this.#streak.begin();
      try {
        const result = await this.#primary.reserve(request);
        this.#streak.succeeded();
        return { ...result, fallback: false };
      } catch (err) {
        this.#failed(err, ticket);
      }
    }
    const answer = this.#answering(policy);
    if (answer === 'local' && this.#peers.known !== false) {
      return { ...(await this.#fallback.reserve({ ...request, limits: this.#scale(request.limits) })), fallback: true };
    }
    const r = await this.#fallbackConsume({ key: request.key, limits: request.limits, cost: request.min, leaseId: '' }, answer);
    return { ...r, granted: r.allowed ? request.max : 0, fallback: true };
  }

  /**
   * Books on the store. A store that cannot book, or one that is down, gets a plain decision
   * instead (outcome `admitted` or `denied`, by `policy` while down): a fallback's local share
   * has no global line to keep a place in, and a claim then finds nothing (`missing`).
   */
  async book(request: BookRequest, policy: StoreFailurePolicy): Promise<BookResult & { fallback?: true; unavailable?: boolean }> {
    const plain = async (away: boolean): Promise<BookResult & { fallback?: true; unavailable?: boolean }> => {
      if (!request.create) {
        const missing: BookResult = {
          allowed: false,
          outcome: 'missing',
          statuses: unjudgedStatuses(request.limits),
          now: this.#clock.now(),
        };
        // While the store is away, the answer is the fallback's (a store that cannot book is not away).
        return away ? { ...missing, fallback: true, unavailable: true } : missing;
      }
      const r = await this.consume({ key: request.key, limits: request.limits, cost: request.cost, leaseId: '' }, policy);
      return { ...r, outcome: r.allowed ? 'admitted' : 'denied' };
    };
    if (!this.#healthy || this.#primary.book === undefined) return plain(!this.#healthy);
    const ticket = this.#streak.begin();
    try {
      const result = await this.#primary.book(request);
      this.#streak.succeeded();
      return result;
    } catch (err) {
      this.#failed(err, ticket);
      return plain(true);
    }
  }

  /** Cancels a booking on the store; false while it is down (the booking then expires there). */
  async cancel(request: CancelRequest): Promise<boolean> {
    if (!this.#healthy || this.#primary.cancel === undefined) return false;
    const ticket = this.#streak.begin();
    try {
      const found = await this.#primary.cancel(request);
      this.#streak.succeeded();
      return found;
    } catch (err) {
      this.#failed(err, ticket);
      return false;
    }
  }

  async adjust(request: Parameters<LimitStore['adjust']>[0]): Promise<void> {
    if (this.#healthy) {
      const ticket = this.#streak.begin();
      try {
        await this.#primary.adjust(request);
        this.#streak.succeeded();
        return;
      } catch (err) {
        this.#failed(err, ticket);
      }
    }
    await this.#fallback.adjust({ ...request, limits: this.#scale(request.limits) });
  }

  async renew(request: LeaseRequest): Promise<boolean> {
    return this.#lease(request, 'renew');
  }

  async release(request: LeaseRequest): Promise<boolean> {
    return this.#lease(request, 'release');
  }

  /** Stops probing and frees the fallback; the primary store is the caller's to close. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#unwatch?.();
    if (this.#probeTimer !== undefined) this.#clock.clearTimer(this.#probeTimer);
    this.#probeTimer = undefined;
    await this.#probe;
    await this.#fallback.close();
  }

  async #lease(request: LeaseRequest, op: 'renew' | 'release'): Promise<boolean> {
    // Leases taken from the fallback carry a prefix, so they return to it after recovery.
    if (request.leaseId.startsWith(LOCAL_LEASE_PREFIX)) {
      return this.#fallback[op]({ ...request, limits: this.#scale(request.limits) });
    }
    if (!this.#healthy) return op === 'renew';
    const ticket = this.#streak.begin();
    try {
      const kept = await this.#primary[op](request);
      this.#streak.succeeded();
      return kept;
    } catch (err) {
      this.#failed(err, ticket);
      // The lease lives in the unreachable store and expires there by itself; a renewal is
      // reported as kept so work is not abandoned because of the outage.
      return op === 'renew';
    }
  }

  /**
   * The policy a failed call is answered by. While the store has not been switched off, this
   * process's global admissions are its share of the limit: a local admission on top of them
   * would exceed it, so a call that timed out under `local` is denied (retry after one probe
   * interval) until the switch; after it, the local share decides.
   */
  #answering(policy: StoreFailurePolicy): StoreFailurePolicy {
    return policy === 'local' && this.#healthy ? 'closed' : policy;
  }

  async #fallbackConsume(request: ConsumeRequest, policy: StoreFailurePolicy): Promise<ConsumeResult> {
    const now = this.#clock.now();
    // Until the number of peers is known, no share is known to be safe: deny.
    if (policy === 'local' && this.#peers.known === false) policy = 'closed';
    if (policy === 'local') {
      const leaseId = request.leaseId === '' ? '' : `${LOCAL_LEASE_PREFIX}${request.leaseId}`;
      return this.#fallback.consume({ ...request, limits: this.#scale(request.limits), leaseId });
    }
    const allowed = policy === 'open';
    const retryMs = this.#healthy ? this.#probeMs : this.#maxProbeMs;
    const statuses = request.limits.map((l) => ({
      id: l.id,
      algorithm: l.algorithm,
      allowed,
      limit: l.limit,
      remaining: allowed ? l.limit : 0,
      retryAfterMs: allowed ? 0 : retryMs,
      resetAfterMs: allowed ? 0 : retryMs,
    }));
    return { allowed, statuses, now };
  }

  /** The limits divided by the number of live clients (at least 1 permit each). */
  #scale(limits: readonly CompiledLimit[]): readonly CompiledLimit[] {
    const peers = Math.max(1, Math.floor(this.#peers.count));
    if (peers === 1) return limits;
    const cached = this.#scaled.get(limits);
    if (cached?.peers === peers) return cached.limits;
    const scaled = Object.freeze(
      limits.map((l) =>
        Object.freeze({ ...l, limit: Math.max(1, Math.floor(l.limit / peers)), burst: Math.max(1, Math.floor(l.burst / peers)) }),
      ),
    );
    this.#scaled.set(limits, { peers, limits: scaled });
    return scaled;
  }

  /** A call failed: rethrows what is not a store failure, else counts it (and maybe switches). */
  #failed(err: unknown, ticket: number): void {
    if (!isStoreFailure(err)) throw err;
    // A store that reports its connection (the Redis store) has said so already if it was lost:
    // its failed calls (say, a connection still being set up on a busy host) count as timeouts.
    const lost = this.#unwatch === undefined && isConnectionLoss(err);
    if (lost || this.#streak.failed(ticket)) this.#markDown(err);
  }

  #markDown(error: unknown): void {
    if (!this.#healthy || this.#closed) return;
    this.#healthy = false;
    this.#streak.reset();
    this.#logger?.warn(
      {
        err: error,
        store: this.#primary.name,
        peers: this.#peers.known === false ? 'unknown' : this.#peers.count,
        consecutiveFailures: this.#streak.threshold,
      },
      'rate-limit store unavailable: deciding by store-failure policy',
    );
    this.#onSwitch?.({ healthy: false, error });
    this.#scheduleProbe(this.#probeMs);
  }

  /** The store says it is connected again: probe now rather than at the next backoff step. */
  #probeNow(): void {
    if (this.#healthy || this.#closed || this.#probe !== undefined) return;
    if (this.#probeTimer !== undefined) this.#clock.clearTimer(this.#probeTimer);
    this.#probeTimer = undefined;
    this.#probe = this.#runProbe(this.#probeMs).finally(() => (this.#probe = undefined));
  }

  #scheduleProbe(delay: number): void {
    if (this.#closed) return;
    this.#probeTimer = this.#clock.setTimer(
      () => {
        this.#probeTimer = undefined;
        this.#probe = this.#runProbe(delay).finally(() => (this.#probe = undefined));
      },
      delay,
      true,
    );
  }

  async #runProbe(delay: number): Promise<void> {
    try {
      await this.#primary.ping();
    } catch {
      this.#scheduleProbe(Math.min(this.#maxProbeMs, delay * 2));
      return;
    }
    if (this.#closed || this.#healthy) return;
    this.#healthy = true;
    this.#streak.reset();
    this.#logger?.info({ store: this.#primary.name }, 'rate-limit store is back: global decisions resumed');
    this.#onSwitch?.({ healthy: true });
  }
}
