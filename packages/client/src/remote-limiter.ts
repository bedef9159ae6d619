import {
  AdaptiveTimeout,
  Degradation,
  ErrorCodes,
  FailoverMachine,
  Limiter,
  SluiceError,
  checkBookingId,
  checkCost,
  checkDelta,
  callKey,
  describePolicies,
  optionsPermitId,
  secondsText,
  invalid,
  isLocalPermit,
  isTierName,
  TIER_NAME,
  type AcquireOptions,
  type AdjustOptions,
  type BookOptions,
  type CancelOptions,
  type Decision,
  type OutcomeReport,
  type DecisionMode,
  type PermitOptions,
  type PeerCount,
  type RateLimiter,
  type ResourceConfig,
  type StoreFailurePolicy,
  type TimerHandle,
  type TryOptions,
  type ClockSkewMonitor,
} from '@sluice/core';
import { BookingTokens } from './booking-tokens.js';
import { OutcomeReporter, type OutcomeReporterStats } from './outcome-reporter.js';
import { CheckBatcher, Overloaded, type CheckItem } from './batcher.js';
import { keyed, PolicyFallback } from './fallback.js';
import { compileRemoteOptions, intOption, type CompiledRemoteOptions, type RemoteLimiterOptions } from './options.js';
import { RemoteStore, leaseLimiter } from './remote-store.js';
import { clientClockSkew } from './clock-skew.js';
import { decodeDecision, decodeError } from '@sluice/core/wire';
import { ClosedByCaller, HttpTransport, isUnavailable, type Transport } from './transport.js';
import { viewFromBody, type RulesView, type ViewResource } from './wire.js';

const TENANT_PATTERN = /^[^|]{1,128}$/;

/** A validated call. */
interface Call {
  readonly resource: string;
  readonly view: ViewResource;
  readonly leased: boolean;
  readonly key: string;
  readonly cost: number;
  readonly item: CheckItem;
}

/** No resource list was ever read from the service: nothing is known of its limits yet. */
class NoResourceList extends SluiceError {
  constructor() {
    super(ErrorCodes.STORE_UNAVAILABLE, 'no resource list from the sluice service yet');
  }
}

/** Decisions of the fallback and leases are made by these modes (bookings are decided as checks). */
type PlainMode = 'try' | 'acquire';

/**
 * The {@link RateLimiter} interface over a running `sluice serve`: swap
 * `new Limiter({ store, resources })` for `new RemoteLimiter({ url })` and keep every call site.
 *
 * - Checks of one event-loop turn go out as one `POST /v1/check` batch over keep-alive
 *   connections; `acquire` waits on the service and is cancelled with its AbortSignal.
 * - Resources, limits and policies come from the service (`GET /v1/resources`), re-read when an
 *   answer names a newer rule version and every `rulesPollMs`.
 * - Resources whose rules ask for leases take permits in batches (`POST /v1/reserve`) and serve
 *   `trySync`/`try` locally, by the core limiter's lease rules; leftovers go back on expiry, on
 *   a rule change and on close.
 * - While the service is unavailable, each resource follows its store-failure policy: `local`
 *   decides on an in-process limiter holding a fair share (the limit divided by the clients the
 *   service counts; nothing until that count is known), `open` admits, `closed` denies;
 *   decisions then have source `fallback`, and `/readyz` is probed until the service is back.
 *   One timed-out call is answered by its policy without switching: an unreachable service or
 *   `consecutiveFailures` timeouts in a row switch. The call timeout adapts to the service's
 *   latency unless `checkTimeoutMs` fixes it.
 * - `book`, `claim` and `cancel` are the service's deferred admission (`POST /v1/book`,
 *   `/v1/claim`, batched like checks, and `/v1/cancel`). Bookings live on the service only:
 *   while it is away a booking call is a plain decision of the fallback (`booking.outcome`
 *   `admitted` or `denied`) and a claim finds nothing (`missing`).
 */
export class RemoteLimiter implements RateLimiter {
  readonly #o: CompiledRemoteOptions;
  readonly #transport: Transport;
  readonly #batcher: CheckBatcher;
  /** The tokens of this process's bookings, sent for the caller (see BookingTokens). */
  readonly #tokens = new BookingTokens();
  readonly #outcomes: OutcomeReporter;
  /** The service's health: one state machine for checks, leases and the fallback. */
  readonly #health: FailoverMachine;
  readonly #timeout: AdaptiveTimeout;
  /** Lease resources: the core limiter over the service as a store. */
  readonly #leases: Limiter;
  /** The `local` store-failure policy: fair shares on an in-memory limiter. */
  readonly #fallback: PolicyFallback;
  readonly #tracked = new Set<Promise<unknown>>();
  readonly #waits = new Set<AbortController>();
  #view: RulesView | undefined;
  #refreshing: Promise<void> | undefined;
  /** Why the last read of the resource list failed, when the service refused it (e.g. a wrong token). */
  #refused: SluiceError | undefined;
  /** Reads of the resource list refused (not for want of the service: that is the health's). */
  readonly #unread: Degradation;
  #pollTimer: TimerHandle | undefined;
  #closing: Promise<void> | undefined;

  constructor(options: RemoteLimiterOptions) {
    const o = compileRemoteOptions(options);
    this.#o = o;
    this.#unread = new Degradation({ logger: o.switchLogger, clock: o.clock, event: 'client_rules_unread' });
    const transport =
      o.transport ??
      new HttpTransport({
        url: o.url,
        clientId: o.clientId,
        heartbeatMs: o.rulesPollMs,
        token: o.token,
        connections: o.connections,
        tls: o.tls,
      });
    // Every answer names the service's rule version: a newer one triggers a refresh.
    this.#transport = {
      call: async (path, options) => {
        const a = await transport.call(path, options);
        if (a.rulesVersion !== undefined) this.#noteVersion(a.rulesVersion);
        return a;
      },
      close: () => transport.close(),
    };
    // Built before anything starts: bad settings throw with nothing to stop.
    this.clockSkew = clientClockSkew(options.clockSkew, this.#transport, o.clock, o.switchLogger);
    this.#timeout = new AdaptiveTimeout({
      ...(o.checkTimeoutMs === undefined ? {} : { fixedMs: o.checkTimeoutMs }),
      minMs: 100,
      maxMs: 1000,
    });
    this.#batcher = new CheckBatcher(this.#transport, {
      maxBatch: o.maxBatch,
      maxPending: o.maxPending,
      timeout: this.#timeout,
    });
    this.#outcomes = new OutcomeReporter({
      transport: this.#transport,
      clock: o.clock,
      maxBatch: o.maxBatch,
      flushMs: o.outcomeFlushMs,
      maxQueued: o.maxQueuedOutcomes,
      timeoutMs: () => Math.max(this.#timeout.currentMs, 1000),
      token: o.outcomesToken,
      logger: o.switchLogger,
    });
    const store = new RemoteStore(this.#transport, {
      timeout: this.#timeout,
      readyTimeoutMs: Math.max(o.checkTimeoutMs ?? 0, 1000),
      onAnswer: () => this.#health.succeeded(),
    });
    this.#health = new FailoverMachine({
      clock: o.clock,
      probe: () => store.ping(),
      probeIntervalMs: o.probeIntervalMs,
      maxProbeIntervalMs: o.maxProbeIntervalMs,
      consecutiveFailures: o.consecutiveFailures,
      subject: `sluice service at ${o.url}`,
      policy: () => this.#policies(),
      logFields: () => ({ service: o.url }),
      logger: o.switchLogger,
    });
    this.#health.onSwitch(({ healthy }) => {
      o.observer?.storeSwitched?.({ healthy });
      if (healthy) this.#track(this.#refresh());
    });
    this.#leases = leaseLimiter(store, o, () => this.#peers(), this.#health);
    this.#fallback = new PolicyFallback(o.clock, o.maxKeyLength, o.maxWaitMs, this.#health);
    this.#track(this.#refresh());
    this.#schedulePoll();
    this.clockSkew?.start();
  }

  /** This host's measured skew to the store's clock, with the `clockSkew` option; else undefined. */
  readonly clockSkew: ClockSkewMonitor | undefined;

  /** The active rule version as last seen (0 before the first resource list). */
  get rulesVersion(): number {
    return this.#view?.version ?? 0;
  }

  /** False while the service is considered unavailable (calls follow the store-failure policies). */
  get healthy(): boolean {
    return this.#health.healthy;
  }

  /** Resolves once the resource list has been read from the service (or the attempt failed). */
  async ready(): Promise<boolean> {
    await this.#refreshing;
    return this.#view !== undefined;
  }

  /** True if the service has limits for the resource (as of the last resource list). */
  has(resource: string): boolean {
    return this.#view?.resources.has(resource) ?? false;
  }

  /** Decides from a lease, or while the service is away by an `open`/`closed` policy; else undefined. */
  trySync(resource: string, options: TryOptions = {}): Decision | undefined {
    if (this.#view === undefined) return undefined;
    const startedAt = this.#start();
    const call = this.#prepare(resource, options);
    if (call.leased) {
      return this.#leases.trySync(resource, { ...keyed(call.key), cost: call.cost });
    }
    if (this.#health.healthy || call.view.compiled.onStoreFailure === 'local') return undefined;
    return this.#observe(resource, 'try', this.#fallback.byPolicy(call.view), startedAt);
  }

  async try(resource: string, options: TryOptions = {}): Promise<Decision> {
    const startedAt = this.#start();
    const call = await this.#limitedCall(resource, options);
    if (!('view' in call)) return this.#observe(resource, 'try', call, startedAt);
    if (call.leased) return this.#leases.try(resource, { ...keyed(call.key), cost: call.cost });
    if (!this.#health.healthy) return this.#observe(resource, 'try', await this.#fallbackDecision(call, 'try', true), startedAt);
    const ticket = this.#health.begin();
    try {
      const d = await this.#batcher.check(call.item);
      this.#health.succeeded();
      return this.#observe(resource, 'try', d, startedAt);
    } catch (err) {
      return this.#observe(resource, 'try', await this.#onFailure(err, call, 'try', ticket), startedAt);
    }
  }

  async acquire(resource: string, options: AcquireOptions = {}): Promise<Decision> {
    const startedAt = this.#start();
    const call = await this.#limitedCall(resource, options);
    if (!('view' in call)) return this.#observe(resource, 'acquire', call, startedAt);
    const maxWaitMs = intOption(options.maxWaitMs, 'maxWaitMs', this.#o.maxWaitMs, 0, 24 * 3600 * 1000);
    const signal = options.signal;
    throwIfAborted(signal);
    if (call.leased) {
      return this.#leases.acquire(resource, { ...keyed(call.key), cost: call.cost, maxWaitMs, ...(signal ? { signal } : {}) });
    }
    if (!this.#health.healthy) {
      return this.#observe(
        resource,
        'acquire',
        await this.#fallbackDecision(call, 'acquire', true, maxWaitMs, signal),
        startedAt,
      );
    }
    const started = this.#o.clock.now();
    // One controller per wait: the caller's signal, and close(), both end it.
    const wait = new AbortController();
    const onAbort = () => wait.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    this.#waits.add(wait);
    let d: Decision;
    const ticket = this.#health.begin();
    try {
      const a = await this.#transport.call('/v1/acquire?statuses=1', {
        body: { ...call.item, maxWaitMs },
        timeoutMs: maxWaitMs + this.#o.acquireMarginMs,
        signal: wait.signal,
      });
      if (a.status !== 200) throw decodeError(a.body, a.status);
      d = decodeDecision(a.body);
    } catch (err) {
      if (this.#closing !== undefined) throw new ClosedByCaller();
      throwIfAborted(signal);
      const left = Math.max(0, maxWaitMs - (this.#o.clock.now() - started));
      return this.#observe(resource, 'acquire', await this.#onFailure(err, call, 'acquire', ticket, left, signal), startedAt);
    } finally {
      signal?.removeEventListener('abort', onAbort);
      this.#waits.delete(wait);
    }
    if (d.waitedMs !== undefined && d.waitedMs > 0) {
      this.#o.observer?.waited?.({ resource, waitedMs: d.waitedMs, outcome: d.allowed ? 'granted' : 'timeout' });
    }
    return this.#observe(resource, 'acquire', d, startedAt);
  }

  async release(resource: string, options: PermitOptions): Promise<boolean> {
    return this.#permit(resource, options, 'release');
  }

  async renew(resource: string, options: PermitOptions): Promise<boolean> {
    return this.#permit(resource, options, 'renew');
  }

  /**
   * Charges or refunds permits; with `tenant`, the service adjusts the tenant's quota too (the
   * lease and the local fallback keep no tenant quotas).
   */
  async adjust(resource: string, options: AdjustOptions): Promise<void> {
    const call = await this.#call(resource, {
      key: options.key,
      cost: 0,
      ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
    });
    const delta = checkDelta(options.delta);
    if (call.leased) return this.#leases.adjust(resource, { ...keyed(call.key), delta });
    const local = call.view.compiled.onStoreFailure === 'local';
    if (this.#health.healthy) {
      const ticket = this.#health.begin();
      try {
        const a = await this.#transport.call('/v1/adjust', {
          body: {
            resource,
            ...keyed(call.key),
            delta,
            ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
          },
          timeoutMs: this.#timeout.currentMs,
        });
        if (a.status !== 200) throw decodeError(a.body, a.status);
        this.#health.succeeded();
        return;
      } catch (err) {
        if (!isUnavailable(err)) throw err;
        this.#health.failed(err, ticket);
      }
    }
    if (local) {
      this.#syncFallback();
      await this.#fallback.adjust(resource, call.key, delta);
    }
  }

  /**
   * Deferred admission on the service (`POST /v1/book`; see the core's `Limiter.book`): admits
   * now if the key has room (`booking.outcome` `admitted`); otherwise books the earliest slot
   * after every slot already promised and answers a denial whose `retryAfterMs` is when the slot
   * starts (`booked`, with `booking.startsInMs` and `booking.expiresInMs`). Calling it again with
   * the same `id` before the start answers `booked` again; within the booking's span it admits
   * (`claimed`) without competing with other callers; after the span the booking has expired and
   * the call starts afresh. Calls of one event-loop turn go out as one batch.
   *
   * A booking belongs to the token it was made with: `options.token`, or one this client makes
   * and remembers (for up to 10,000 bookings) and sends with every later call under the id, so
   * the caller need not carry it. Another process claiming the booking must be given the token
   * (`booking.token` of the answer). A held id under another token is refused by the service:
   * `SLUICE_ERR_BOOKING_TOKEN`.
   *
   * Nothing is booked (a plain decision, `admitted` or `denied`) on resources the service cannot
   * book (see `Limiter.book`), on resources this client leases (decided from the lease), and while
   * the service is unavailable: the resource's store-failure policy decides then, as for `try`
   * (source `fallback`), since a fallback's local share holds no place in the service's line.
   *
   * @throws SluiceError `SLUICE_ERR_INVALID_OPTIONS` (field `id`) for an id that is not 1 to 128
   *   printable ASCII characters, and the validation errors of {@link try}, before any call.
   */
  async book(resource: string, options: BookOptions): Promise<Decision> {
    return this.#book(resource, options, 'book');
  }

  /**
   * Claims a booking made by {@link book}, never making one (`POST /v1/claim`): `claimed`
   * (admitted), `booked` (not yet due: `retryAfterMs` says when) or `missing` (nothing held under
   * that id: never made, claimed, cancelled or expired). While the service is unavailable a claim
   * is `missing`, denied with reason `store_unavailable`, source `fallback` and `retryAfterMs` =
   * `maxProbeIntervalMs`: the booking, if any, is still held on the service, to be claimed once it
   * is back (within its span).
   */
  async claim(resource: string, options: BookOptions): Promise<Decision> {
    return this.#book(resource, options, 'claim');
  }

  /**
   * Cancels a booking not yet claimed (`POST /v1/cancel`); its permits go back where the
   * algorithm's bound allows. True if it was held. False while the service is unavailable (the
   * booking then expires there by itself) and on resources this client leases (never booked).
   */
  async cancel(resource: string, options: CancelOptions): Promise<boolean> {
    const call = await this.#call(resource, { key: options.key, cost: 0 });
    const id = checkBookingId(options.id, 'id');
    const token = this.#tokens.tokenFor(resource, call.key, id, options.token, false);
    if (call.leased || !this.#health.healthy) return false;
    const ticket = this.#health.begin();
    try {
      const a = await this.#transport.call('/v1/cancel', {
        body: { resource, ...keyed(call.key), id, ...(token === undefined ? {} : { token }) },
        timeoutMs: this.#timeout.currentMs,
      });
      if (a.status !== 200) throw decodeError(a.body, a.status);
      this.#health.succeeded();
      this.#tokens.forget(resource, call.key, id);
      return (a.body as { cancelled?: unknown } | null)?.cancelled === true;
    } catch (err) {
      if (!isUnavailable(err)) throw err;
      this.#health.failed(err, ticket);
      return false;
    }
  }

  /**
   * Reports how a call to the resource's downstream went (`POST /v1/outcomes`, batched), for
   * its breaker (fleet-wide ones in the store) and the service's tallies. Never waits and never
   * throws: a full queue drops the report (counted in {@link outcomeStats}).
   */
  reportOutcome(report: OutcomeReport): boolean {
    return this.#outcomes.report(report);
  }

  /** Outcome reports sent, dropped (queue full or request failed) and refused by the service. */
  get outcomeStats(): OutcomeReporterStats {
    return this.#outcomes.stats;
  }

  /**
   * Runs `fn` under the resource's limits, as core's `Limiter.call`: acquires (waiting up to
   * `maxWaitMs`), runs, reports the outcome to the service and releases a concurrency permit. A
   * denial rejects with `SLUICE_ERR_LIMITED`, whose `decision` says why and when to retry.
   */
  async call<T>(resource: string, fn: () => Promise<T>, options: AcquireOptions = {}): Promise<T> {
    const d = await this.acquire(resource, options);
    if (!d.allowed) {
      throw new SluiceError(ErrorCodes.LIMITED, `${resource}: ${d.reason}, retry in ${d.retryAfterMs} ms`, { decision: d });
    }
    const started = this.#o.clock.now();
    const done = (ok: boolean) =>
      this.reportOutcome({
        resource,
        ...(options.key === undefined ? {} : { key: options.key }),
        ok,
        durationMs: Math.max(0, this.#o.clock.now() - started),
      });
    try {
      const result = await fn();
      done(true);
      return result;
    } catch (err) {
      done(false);
      throw err;
    } finally {
      if (d.permitId !== undefined) await this.release(resource, { key: options.key, permitId: d.permitId });
    }
  }

  /** Returns leases, ends waits and probes, stops timers and closes the connections. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#pollTimer !== undefined) this.#o.clock.clearTimer(this.#pollTimer);
      this.#pollTimer = undefined;
      await this.clockSkew?.close();
      for (const w of this.#waits) w.abort(new ClosedByCaller());
      await this.#batcher.close();
      await this.#outcomes.close();
      // Leftover leased permits go back to the service (or to the fallback while it is away).
      await this.#leases.close();
      await this.#health.close();
      await Promise.allSettled([...this.#tracked]);
      this.#unread.close();
      await this.#fallback.close();
      // Counted among the service's live clients no longer: the others' fallback shares grow
      // back at once. Best effort, bounded: a service that is away forgets it after its heartbeats.
      if (this.#view !== undefined && this.#health.healthy) {
        await this.#transport.call('/v1/goodbye', { method: 'POST', body: {}, timeoutMs: 1000 }).catch(() => undefined);
      }
      await this.#transport.close();
    })();
    return this.#closing;
  }

  /** Releases or renews a concurrency permit: on the fallback for a `local:` id, else on the service. */
  async #permit(resource: string, options: PermitOptions, op: 'release' | 'renew'): Promise<boolean> {
    const call = await this.#call(resource, { key: options.key, cost: 0 });
    const permitId = optionsPermitId(options);
    const ttlMs = options.ttlMs === undefined ? undefined : intOption(options.ttlMs, 'ttlMs', 0, 1, 24 * 3600 * 1000);
    if (isLocalPermit(permitId)) {
      // Taken from the fallback: it lives there, whether or not the service is back.
      this.#syncFallback();
      return this.#fallback.permit(op, resource, { key: call.key, permitId, ...(ttlMs === undefined ? {} : { ttlMs }) });
    }
    // A permit held by the unreachable service expires there by itself; a renewal is reported
    // as kept so work is not abandoned because of the outage (as the core limiter does).
    if (!this.#health.healthy) return op === 'renew';
    const ticket = this.#health.begin();
    try {
      const a = await this.#transport.call(`/v1/${op}`, {
        body: { resource, ...keyed(call.key), permitId, ...(ttlMs === undefined ? {} : { ttlMs }) },
        timeoutMs: this.#timeout.currentMs,
      });
      if (a.status !== 200) throw decodeError(a.body, a.status);
      const body = a.body as { released?: unknown; renewed?: unknown };
      return (op === 'release' ? body.released : body.renewed) === true;
    } catch (err) {
      if (!isUnavailable(err)) throw err;
      this.#health.failed(err, ticket);
      return op === 'renew';
    }
  }

  async #book(resource: string, options: BookOptions, op: 'book' | 'claim'): Promise<Decision> {
    const startedAt = this.#start();
    const call = await this.#call(resource, options);
    const id = checkBookingId((options as { id?: unknown }).id, 'id');
    // The lease limiter never books a leased resource: plain decisions, and claims find nothing.
    if (call.leased) return this.#leases[op](resource, { ...keyed(call.key), cost: call.cost, id });
    if (!this.#health.healthy) return this.#observe(resource, 'book', await this.#unbooked(call, op, id), startedAt);
    const token = this.#tokens.tokenFor(resource, call.key, id, (options as { token?: unknown }).token, op === 'book');
    const ticket = this.#health.begin();
    try {
      const d = await this.#batcher.book(op, { ...call.item, id, ...(token === undefined ? {} : { token }) });
      this.#health.succeeded();
      this.#tokens.settle(resource, call.key, id, token, d);
      return this.#observe(resource, 'book', d.booking === undefined ? plain(d, id) : d, startedAt);
    } catch (err) {
      if (op === 'claim') {
        if (!(err instanceof Overloaded)) {
          if (!isUnavailable(err)) throw err;
          this.#health.failed(err, ticket);
        }
        return this.#observe(resource, 'book', this.#missing(call, id), startedAt);
      }
      return this.#observe(resource, 'book', plain(await this.#onFailure(err, call, 'try', ticket), id), startedAt);
    }
  }

  /** A booking call the service cannot take: decided as a check by the policy; a claim finds nothing. */
  async #unbooked(call: Call, op: 'book' | 'claim', id: string): Promise<Decision> {
    if (op === 'claim') return this.#missing(call, id);
    return plain(await this.#fallbackDecision(call, 'try', true), id);
  }

  /** A claim while the service is away: nothing to claim here; ask again once it is back. */
  #missing(call: Call, id: string): Decision {
    const d = this.#fallback.byPolicy(call.view, 'closed');
    return { ...d, booking: { outcome: 'missing', id, startsInMs: 0, expiresInMs: 0 } };
  }

  /** Waits for the first resource list if there is none yet, then validates the call. */
  async #call(resource: string, options: TryOptions): Promise<Call> {
    if (this.#closing !== undefined) throw new ClosedByCaller();
    if (this.#view === undefined) {
      await (this.#refreshing ?? this.#refresh());
      if (this.#view === undefined) {
        // A refusal (a missing or wrong token) is the caller's to fix, not an outage.
        if (this.#refused !== undefined) throw this.#refused;
        throw new NoResourceList();
      }
    }
    return this.#prepare(resource, options);
  }

  /**
   * A limited call (`try`, `acquire`): as {@link #call}, but while no resource list was ever
   * read (the service was away since this client started) it is answered, not thrown at: denied
   * with `store_unavailable` by the fallback, since no limit and no policy is known yet (the
   * `closed` answer, the only one safe without them). The caller's own input is still checked.
   */
  async #limitedCall(resource: string, options: TryOptions): Promise<Call | Decision> {
    try {
      return await this.#call(resource, options);
    } catch (err) {
      if (!(err instanceof NoResourceList)) throw err;
      callKey(options.key, this.#o.maxKeyLength);
      if (options.cost !== undefined) checkCost(options.cost, []);
      const retryMs = Math.max(1, this.#health.retryAfterMs);
      return {
        allowed: false,
        limit: 0,
        remaining: 0,
        retryAfterMs: retryMs,
        resetAfterMs: retryMs,
        reason: 'store_unavailable',
        limitId: '',
        statuses: [],
        source: 'fallback',
      };
    }
  }

  /** The core limiter's validation, against the service's limits. */
  #prepare(resource: string, options: TryOptions): Call {
    if (this.#closing !== undefined) throw new ClosedByCaller();
    const view = this.#view?.resources.get(resource);
    if (view === undefined) {
      throw new SluiceError(ErrorCodes.UNKNOWN_RESOURCE, `no limits configured for resource ${JSON.stringify(resource)}`, {
        field: 'resource',
      });
    }
    const key = callKey(options.key, this.#o.maxKeyLength);
    const cost = checkCost(options.cost ?? 1, view.compiled.limits);
    if (options.tenant !== undefined && (typeof options.tenant !== 'string' || !TENANT_PATTERN.test(options.tenant))) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'tenant', "must be 1 to 128 characters without '|'");
    }
    // Which tiers a resource has is the service's to say (SLUICE_ERR_UNKNOWN_TIER); the shape is checked here.
    const priority = options.priority ?? this.#o.priority;
    if (priority !== undefined && !isTierName(priority)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'priority', `must be a tier name (${TIER_NAME})`);
    }
    const item: CheckItem = {
      resource,
      ...(key === '' ? {} : { key }),
      ...(cost === 1 ? {} : { cost }),
      ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
      ...(priority === undefined ? {} : { priority }),
    };
    // A tenant's quota lives on the service: its calls are decided there, never from the lease.
    return { resource, view, leased: this.#leased(view) && options.tenant === undefined, key, cost, item };
  }

  #leased(view: ViewResource): boolean {
    // Concurrency limits, split keys and core shares cannot be reserved on the service.
    if (!view.reservable) return false;
    return view.compiled.lease !== undefined || this.#o.lease !== undefined;
  }

  /** A failed call: the store-failure policy if the service is away, the error otherwise. */
  async #onFailure(
    err: unknown,
    call: Call,
    mode: PlainMode,
    ticket: number,
    maxWaitMs = 0,
    signal?: AbortSignal,
  ): Promise<Decision> {
    // A full queue means this process outpaces the service: decided on the local share, without
    // a switch. Otherwise, until the switch, a `local` call is denied: this client's answers from
    // the service are its share of the limit, and a local admission on top would exceed it.
    const overloaded = err instanceof Overloaded;
    if (!overloaded) {
      if (!isUnavailable(err)) throw err;
      this.#health.failed(err, ticket);
    }
    return this.#fallbackDecision(call, mode, overloaded || !this.#health.healthy, maxWaitMs, signal);
  }

  async #fallbackDecision(
    call: Call,
    mode: PlainMode,
    switched: boolean,
    maxWaitMs = 0,
    signal?: AbortSignal,
  ): Promise<Decision> {
    this.#syncFallback();
    return this.#fallback.decide(call, mode, switched, maxWaitMs, signal);
  }

  #syncFallback(): void {
    this.#fallback.sync(this.#view, this.#peers());
  }

  /**
   * Clients sharing the limits: the configured number or the service's recent count, the
   * larger. With neither (no count read from the service yet), unknown: no share is safe.
   */
  #peers(): PeerCount {
    const seen = this.#view?.clients ?? 0;
    if (this.#o.clients !== undefined) return { count: Math.max(this.#o.clients, seen), known: true };
    return { count: Math.max(1, seen), known: seen > 0 };
  }

  #apply(view: RulesView): void {
    const before = this.#view;
    this.#view = view;
    if (before !== undefined && before.version === view.version) return;
    const leased: Record<string, ResourceConfig> = {};
    for (const [name, r] of view.resources) {
      if (!this.#leased(r)) continue;
      const lease = r.compiled.lease ?? this.#o.lease!;
      leased[name] = { limits: r.policies, lease, onStoreFailure: r.compiled.onStoreFailure, prefilter: false };
    }
    // New limits make the lease cache return permits taken under the old ones.
    this.#leases.setResources(leased);
    this.#o.logger?.info({ version: view.version, resources: view.resources.size }, 'sluice client: rules version active');
  }

  /** The store-failure policies of the resources as last read, for the switch lines (see `describePolicies`). */
  #policies(): string {
    const each = [...(this.#view?.resources ?? new Map<string, ViewResource>())].map(
      ([name, r]) => [name, r.compiled.onStoreFailure] as const,
    );
    if (each.length === 0) return "each resource's store-failure policy";
    // The most common policy is named as the rule, the others as exceptions.
    const counts = new Map<StoreFailurePolicy, number>();
    for (const [, p] of each) counts.set(p, (counts.get(p) ?? 0) + 1);
    const common = [...counts].sort((a, b) => b[1] - a[1])[0]![0];
    return describePolicies(common, each);
  }

  #refresh(): Promise<void> {
    this.#refreshing ??= (async () => {
      try {
        const a = await this.#transport.call('/v1/resources', { timeoutMs: Math.max(this.#o.checkTimeoutMs ?? 0, 1000) });
        if (a.status !== 200) throw decodeError(a.body, a.status);
        if (this.#closing === undefined) this.#apply(viewFromBody(a.body, this.#o.logger));
        this.#refused = undefined;
        this.#unread.recover((spell) => ({
          msg: `sluice client: the resource list of ${this.#o.url} read again after ${secondsText(spell.lastedMs)}`,
        }));
      } catch (err) {
        if (isUnavailable(err)) this.#health.markDown(err);
        else {
          if (err instanceof SluiceError) this.#refused = err;
          // Read again every poll: one line while it keeps failing, one when it is read again.
          this.#unread.fail(err, (reason) => ({
            msg: `sluice client: the resource list of ${this.#o.url} could not be read (${reason}): ${this.#view === undefined ? 'calls are refused' : `the rules of version ${this.#view.version} stay`} until it is`,
            ...(err instanceof SluiceError ? {} : { fields: { err } }),
          }));
        }
      }
    })().finally(() => (this.#refreshing = undefined));
    return this.#refreshing;
  }

  #noteVersion(version: number): void {
    if (this.#closing === undefined && version > (this.#view?.version ?? 0)) this.#track(this.#refresh());
  }

  #schedulePoll(): void {
    if (this.#closing !== undefined) return;
    this.#pollTimer = this.#o.clock.setTimer(
      () => {
        this.#pollTimer = undefined;
        // While the service is away the probe notices its return and refreshes then.
        const p = this.#health.healthy ? this.#refresh() : Promise.resolve();
        this.#track(p.finally(() => this.#schedulePoll()));
      },
      this.#o.rulesPollMs,
      true,
    );
  }

  #track(p: Promise<unknown>): void {
    const t = p.catch(() => undefined).finally(() => this.#tracked.delete(t));
    this.#tracked.add(t);
  }

  /** When a call started, for {@link #observe} to time it: 0 (no clock read) unless the observer times decisions. */
  #start(): number {
    return this.#o.observer?.decided === undefined ? 0 : this.#o.clock.now();
  }

  /** Tells the observer of a decision of a call started at `startedAt` (see {@link #start}). */
  #observe(resource: string, mode: DecisionMode, decision: Decision, startedAt: number): Decision {
    // Counted for the switch lines (leased resources are counted by their own limiter).
    if (decision.source === 'fallback') this.#health.fallbackDecided();
    const observer = this.#o.observer;
    if (observer?.decided !== undefined)
      observer.decided({ resource, mode, decision, durationMs: this.#o.clock.now() - startedAt });
    return decision;
  }
}

/** A decision that booked nothing, with the booking it speaks of (as the core limiter answers). */
function plain(d: Decision, id: string): Decision {
  return { ...d, booking: { outcome: d.allowed ? 'admitted' : 'denied', id, startsInMs: 0, expiresInMs: 0 } };
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new SluiceError(ErrorCodes.ABORTED, 'the wait was aborted', { cause: signal.reason });
}
