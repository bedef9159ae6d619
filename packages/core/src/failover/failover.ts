import type { Clock } from '../shared/clock.js';
import { ErrorCodes, SluiceError, invalid } from '../shared/errors.js';
import {
  FailoverMachine,
  answeringPolicy,
  fairShareOf,
  isLocalPermit,
  localPermitId,
  policyStatuses,
  type FailoverSwitch,
  type StoreFailurePolicy,
} from './failover-state.js';
import { resolveLogger, type Logger } from '../shared/log.js';
import { intOption } from '../shared/options.js';
import { MemoryStore } from '../store/memory-store.js';
import { storeCallTimer, timedCall, type StoreCallTimer } from '../store/store-calls.js';
import { unjudgedStatuses } from '../shared/decision.js';
import type { CompiledLimit } from '../shared/policy.js';
export type { Logger } from '../shared/log.js';
export type { PeerCount } from '../store/store.js';
import type {
  BookRequest,
  BookResult,
  CancelRequest,
  ConsumeRequest,
  ConsumeResult,
  PermitRequest,
  LimitStore,
  PeerCount,
  ReserveRequest,
  ReserveResult,
  StoreCall,
  StoreOperation,
} from '../store/store.js';

export { STORE_FAILURE_POLICIES, type StoreFailurePolicy } from './failover-state.js';

/** Options of {@link Failover}. */
export interface FailoverOptions {
  /**
   * Live clients sharing the store: a registry, or a fixed number.
   * @default the store's own count (`store.peers`, kept by the Redis store), else 1 (a store
   * that only this process uses, such as the in-memory one)
   */
  peers?: PeerCount | number;
  /**
   * The most processes that may share the store (an upper bound you know from your deployment:
   * replicas times processes each). While the live count cannot be read (the store was away
   * when this process started, so no count was ever read), the `local` policy gives each
   * process `limit / maxPeers` of every limit instead of denying: the fleet stays within the
   * limit as long as it really has no more processes. Once a count is read it is used.
   * @default none: the `local` policy denies until a count is read
   */
  maxPeers?: number;
  /**
   * Whether any call may be answered by the `local` policy (the switch line then says what its
   * share is while the live count is unknown). @default true
   */
  usesLocal?: () => boolean;
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
  /**
   * Where switches are logged (one line when the store becomes unreachable, one when it answers
   * again, a summary every `summaryIntervalMs` while it stays away); `false` for nowhere.
   * @default JSON lines on stderr
   */
  logger?: Logger | false;
  /** While the store stays away, a summary line once per this many ms; 0 for none. @default 30000 */
  summaryIntervalMs?: number;
  /**
   * The policy answering while the store is away, as the switch's log line names it (`the
   * 'local' policy`); the limiter describes its resources' policies.
   * @default `each resource's store-failure policy`
   */
  policy?: () => string;
  /** Called on every switch between the store and the fallback. */
  onSwitch?: (event: FailoverSwitch) => void;
  /**
   * Called after every call to the store that left the process (not the fallback's, nor those of
   * an in-memory store), with its duration and error; health probes are `ping` calls.
   */
  onCall?: (call: StoreCall) => void;
  /**
   * The health of the store, shared with other users of the same store (the remote client's
   * checks and leases), so there is one health loop for it. When given, it is the shared
   * machine's settings that count (`consecutiveFailures`, probe intervals, logger), and it is
   * the caller's to close.
   * @default a machine of this failover's own
   */
  health?: FailoverMachine;
}

/** A guarded store's health, for status pages (see `Limiter.storeHealth`). */
export interface StoreHealth {
  /** The store's name: `redis`, `memory`. */
  readonly store: string;
  /** Where it is (no credentials); absent for an in-process store. */
  readonly address?: string;
  /** False while the store is considered down: calls are then answered by their policies. */
  readonly reachable: boolean;
  /** The default store-failure policy (resources may name their own). */
  readonly policy: StoreFailurePolicy;
  /**
   * Every resource's store-failure policy, as the switch's log line names them: `the 'local'
   * policy ('closed' for api:payments)`.
   */
  readonly policies: string;
  /** Decisions made by the fallback since start. */
  readonly fallbackDecisions: number;
  /** While unreachable: since how long, in ms. */
  readonly unreachableForMs?: number;
  /** While unreachable: the latest failure (`ECONNREFUSED 10.0.0.5:6379`). */
  readonly reason?: string;
}

/** True for faults that mean "the store is away", as opposed to bad input. */
export function isStoreFailure(err: unknown): boolean {
  return err instanceof SluiceError && (err.code === ErrorCodes.STORE_TIMEOUT || err.code === ErrorCodes.STORE_UNAVAILABLE);
}

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
  readonly #maxPeers: number | undefined;
  readonly #usesLocal: (() => boolean) | undefined;
  readonly #health: FailoverMachine;
  readonly #ownHealth: boolean;
  readonly #unwatch: (() => void) | undefined;
  readonly #unlisten: (() => void) | undefined;
  readonly #scaled = new WeakMap<readonly CompiledLimit[], { peers: number; limits: readonly CompiledLimit[] }>();
  /** Times the store's calls (see {@link FailoverOptions.onCall}); undefined when nobody listens. */
  readonly #timer: StoreCallTimer | undefined;
  /** The store answers `consumeSync` as it does `consume` (see {@link decidesSync}). */
  readonly #sync: boolean;

  constructor(primary: LimitStore, clock: Clock, options: FailoverOptions = {}) {
    this.#primary = primary;
    this.#sync = decidesSync(primary);
    this.#clock = clock;
    this.#timer = storeCallTimer(primary, clock, options.onCall);
    const timer = this.#timer;
    this.#fallback = new MemoryStore({ clock });
    const peers = options.peers ?? primary.peers ?? 1;
    if (typeof peers === 'number' && (!Number.isInteger(peers) || peers < 1)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'failover.peers', 'must be an integer >= 1 or a PeerCount');
    }
    this.#peers = typeof peers === 'number' ? { count: peers } : peers;
    this.#usesLocal = options.usesLocal;
    this.#maxPeers =
      options.maxPeers === undefined ? undefined : intOption(options.maxPeers, 'failover.maxPeers', undefined, 1, 1_000_000);
    this.#ownHealth = options.health === undefined;
    this.#health =
      options.health ??
      new FailoverMachine({
        clock,
        probe: () => timedCall(timer, clock, 'ping', () => primary.ping()),
        ...(options.consecutiveFailures === undefined ? {} : { consecutiveFailures: options.consecutiveFailures }),
        ...(options.probeIntervalMs === undefined ? {} : { probeIntervalMs: options.probeIntervalMs }),
        ...(options.maxProbeIntervalMs === undefined ? {} : { maxProbeIntervalMs: options.maxProbeIntervalMs }),
        // A store that reports its connection (the Redis store) has said so already if it was
        // lost: its failed calls (say, a connection still being set up on a busy host) count as timeouts.
        connectionReported: primary.watchConnection !== undefined,
        subject: `store ${primary.name}${primary.address === undefined ? '' : ` at ${primary.address}`}`,
        policy: () => `${options.policy?.() ?? "each resource's store-failure policy"}${this.#shareNote()}`,
        ...(options.summaryIntervalMs === undefined ? {} : { summaryIntervalMs: options.summaryIntervalMs }),
        logFields: () => ({
          store: primary.name,
          ...(primary.address === undefined ? {} : { address: primary.address }),
          peers: this.#peers.known === false ? 'unknown' : this.#peers.count,
          ...(this.#maxPeers === undefined ? {} : { maxPeers: this.#maxPeers }),
        }),
        logger: resolveLogger(options.logger),
      });
    const onSwitch = options.onSwitch;
    this.#unlisten = onSwitch === undefined ? undefined : this.#health.onSwitch(onSwitch);
    const health = this.#health;
    this.#unwatch = primary.watchConnection?.((up, error) => (up ? health.probeNow() : health.markDown(error)));
  }

  /** False while the store is considered down. */
  get healthy(): boolean {
    return this.#health.healthy;
  }

  /** The store's health: its state and switches. */
  get health(): FailoverMachine {
    return this.#health;
  }

  /** The store's health for a status page: `policy` the default, `policies` in words (see `describePolicies`). */
  status(policy: StoreFailurePolicy, policies: string): StoreHealth {
    const outage = this.#health.outage;
    const address = this.#primary.address;
    return {
      store: this.#primary.name,
      ...(address === undefined ? {} : { address }),
      reachable: this.#health.healthy,
      policy,
      policies,
      fallbackDecisions: this.#health.fallbackDecisions,
      ...(outage === undefined ? {} : { unreachableForMs: Math.round(outage.lastedMs), reason: outage.reason }),
    };
  }

  /**
   * Decides on the store, or by `policy` while it is down. `fallback` tells which one answered;
   * `unavailable` that the call was denied for want of the store (not by a local share).
   */
  consume(request: ConsumeRequest, policy: StoreFailurePolicy): Promise<FailoverResult> {
    if (!this.#health.healthy) return this.#fallbackResult(request, policy);
    // One reaction on the store's promise, no async frame: this is every decision's path.
    const ticket = this.#health.begin();
    const timer = this.#timer;
    const startedAt = timer === undefined ? 0 : this.#clock.now();
    let pending: Promise<ConsumeResult>;
    try {
      pending = this.#primary.consume(request);
    } catch (err) {
      pending = Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    return pending.then(
      (result): FailoverResult => {
        timer?.('consume', startedAt);
        this.#health.succeeded();
        // Passed on as it is: a copy per decision showed in profiles.
        return result;
      },
      (err: unknown) => {
        timer?.('consume', startedAt, err ?? new Error('the store call failed'));
        this.#failed(err, ticket);
        return this.#fallbackResult(request, policy);
      },
    );
  }

  /**
   * {@link consume}, answered at once when the store decides synchronously (see
   * `LimitStore.consumeSync`) and is up; a promise otherwise (another store, the fallback, a
   * failed call).
   */
  consumeNow(request: ConsumeRequest, policy: StoreFailurePolicy): FailoverResult | Promise<FailoverResult> {
    if (!this.#sync || !this.#health.healthy) return this.consume(request, policy);
    const ticket = this.#health.begin();
    const timer = this.#timer;
    const startedAt = timer === undefined ? 0 : this.#clock.now();
    let result: ConsumeResult;
    try {
      result = this.#primary.consumeSync!(request);
    } catch (err) {
      timer?.('consume', startedAt, err ?? new Error('the store call failed'));
      this.#failed(err, ticket);
      return this.#fallbackResult(request, policy);
    }
    timer?.('consume', startedAt);
    this.#health.succeeded();
    return result;
  }

  async #fallbackResult(request: ConsumeRequest, policy: StoreFailurePolicy): Promise<FailoverResult> {
    const answer = this.#answering(policy);
    const result = await this.#fallbackConsume(request, answer);
    return { ...result, fallback: true as const, unavailable: answer === 'closed' };
  }

  /**
   * Reserves on the store, or by `policy` while it is down (`open` grants `max`); `unavailable`
   * as for {@link consume}.
   */
  async reserve(
    request: ReserveRequest,
    policy: StoreFailurePolicy,
  ): Promise<ReserveResult & { fallback: boolean; unavailable?: boolean }> {
    if (this.#health.healthy) {
      const ticket = this.#health.begin();
      try {
        const result = await this.#timed('reserve', () => this.#primary.reserve(request));
        this.#health.succeeded();
        return { ...result, fallback: false };
      } catch (err) {
        this.#failed(err, ticket);
      }
    }
    const answer = this.#answering(policy);
    if (answer === 'local') {
      return { ...(await this.#fallback.reserve({ ...request, limits: this.#scale(request.limits) })), fallback: true };
    }
    const r = await this.#fallbackConsume({ key: request.key, limits: request.limits, cost: request.min, permitId: '' }, answer);
    return { ...r, granted: r.allowed ? request.max : 0, fallback: true, unavailable: answer === 'closed' };
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
      const r = await this.consume({ key: request.key, limits: request.limits, cost: request.cost, permitId: '' }, policy);
      return { ...r, outcome: r.allowed ? 'admitted' : 'denied' };
    };
    if (!this.#health.healthy || this.#primary.book === undefined) return plain(!this.#health.healthy);
    const book = this.#primary.book.bind(this.#primary);
    return this.#guarded(
      'book',
      () => book(request),
      () => plain(true),
    );
  }

  /** Cancels a booking on the store; false while it is down (the booking then expires there). */
  async cancel(request: CancelRequest): Promise<boolean> {
    if (!this.#health.healthy || this.#primary.cancel === undefined) return false;
    const cancel = this.#primary.cancel.bind(this.#primary);
    return this.#guarded(
      'cancel',
      () => cancel(request),
      () => false,
    );
  }

  async adjust(request: Parameters<LimitStore['adjust']>[0]): Promise<void> {
    const local = () => this.#fallback.adjust({ ...request, limits: this.#scale(request.limits) });
    if (!this.#health.healthy) return local();
    return this.#guarded('adjust', () => this.#primary.adjust(request), local);
  }

  async renew(request: PermitRequest): Promise<boolean> {
    return this.#permit(request, 'renew');
  }

  async release(request: PermitRequest): Promise<boolean> {
    return this.#permit(request, 'release');
  }

  /** Stops probing (if the health is this failover's own) and frees the fallback; the primary store is the caller's to close. */
  async close(): Promise<void> {
    this.#unwatch?.();
    this.#unlisten?.();
    if (this.#ownHealth) await this.#health.close();
    await this.#fallback.close();
  }

  async #permit(request: PermitRequest, op: 'renew' | 'release'): Promise<boolean> {
    // Permits taken from the fallback carry a prefix, so they return to it after recovery.
    if (isLocalPermit(request.permitId)) {
      return this.#fallback[op]({ ...request, limits: this.#scale(request.limits) });
    }
    // The permit lives in the unreachable store and expires there by itself; a renewal is
    // reported as kept so work is not abandoned because of the outage.
    const away = () => op === 'renew';
    if (!this.#health.healthy) return away();
    return this.#guarded(op, () => this.#primary[op](request), away);
  }

  /** One call to the store while it is healthy; `away` answers if it fails for want of the store. */
  async #guarded<T>(operation: StoreOperation, call: () => Promise<T>, away: () => T | Promise<T>): Promise<T> {
    const ticket = this.#health.begin();
    try {
      const result = await this.#timed(operation, call);
      this.#health.succeeded();
      return result;
    } catch (err) {
      this.#failed(err, ticket);
      return away();
    }
  }

  /** `call()` to the store, timed when somebody listens. */
  #timed<T>(operation: StoreOperation, call: () => Promise<T>): Promise<T> {
    return timedCall(this.#timer, this.#clock, operation, call);
  }

  /** The policy a call is answered by while the store cannot decide it (see {@link answeringPolicy}). */
  #answering(policy: StoreFailurePolicy): StoreFailurePolicy {
    return answeringPolicy(policy, this.#health.healthy, this.#peers.known !== false || this.#maxPeers !== undefined);
  }

  /**
   * What the `local` policy's share is while the live count is unknown, for the switch line:
   * `limit / maxPeers`, or nothing (it denies) without `maxPeers`. Empty while the count is known.
   */
  #shareNote(): string {
    if (this.#peers.known !== false || this.#usesLocal?.() === false) return '';
    return this.#maxPeers === undefined
      ? " (live process count unknown: 'local' denies until it is read; set failover.maxPeers for a share meanwhile)"
      : ` (live process count unknown: 'local' gives each process 1/${this.#maxPeers} of every limit, failover.maxPeers)`;
  }

  /** The processes a `local` share divides by: the live count, or `maxPeers` while it is unknown. */
  #divisor(): number {
    if (this.#peers.known === false && this.#maxPeers !== undefined) return this.#maxPeers;
    return Math.max(1, Math.floor(this.#peers.count));
  }

  async #fallbackConsume(request: ConsumeRequest, policy: StoreFailurePolicy): Promise<ConsumeResult> {
    if (policy === 'local') {
      const limits = this.#scale(request.limits);
      return this.#fallback.consume({ ...request, limits, permitId: localPermitId(request.permitId ?? '') });
    }
    const statuses = policyStatuses(request.limits, policy === 'open', this.#health.retryAfterMs);
    return { allowed: policy === 'open', statuses, now: this.#clock.now() };
  }

  /** The limits divided by the number of live clients (at least 1 permit each). */
  #scale(limits: readonly CompiledLimit[]): readonly CompiledLimit[] {
    const peers = this.#divisor();
    if (peers === 1) return limits;
    const cached = this.#scaled.get(limits);
    if (cached?.peers === peers) return cached.limits;
    const scaled = Object.freeze(limits.map((l) => Object.freeze(fairShareOf(l, peers))));
    this.#scaled.set(limits, { peers, limits: scaled });
    return scaled;
  }

  /** A call failed: rethrows what is not a store failure, else tells the health (which may switch). */
  #failed(err: unknown, ticket: number): void {
    if (!isStoreFailure(err)) throw err;
    this.#health.failed(err, ticket);
  }
}

/**
 * True when the store has a `consumeSync` that answers as its `consume` does: a subclass that
 * overrides `consume` but not `consumeSync` (a wrapper counting calls, a test's fake) is asked
 * through its `consume`.
 */
function decidesSync(store: LimitStore): boolean {
  if (store.consumeSync === undefined) return false;
  let owner: object | null = store;
  while (owner !== null && !Object.hasOwn(owner, 'consumeSync')) owner = Object.getPrototypeOf(owner) as object | null;
  return owner !== null && (owner as Partial<LimitStore>).consume === store.consume;
}
