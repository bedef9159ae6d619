import {
  ErrorCodes,
  SluiceError,
  checkCohort,
  type CompiledLimit,
  type Cohort,
  type Decision,
  type Limiter,
  type CircuitState,
  type FleetBreakerPolicy,
  type OutcomeTotals,
  type HotKeyReport,
  type StoreHealth,
} from '@sluice/core';
import {
  encodeResource,
  type AcquireItem,
  type AdjustItem,
  type BookItem,
  type CancelItem,
  type CheckItem,
  type DecisionItem,
  type OutcomeItem,
  type ReleaseItem,
  type RenewItem,
  type ReserveItem,
  type ResourceBody,
  type ResourcesBody,
  type RolloutBody,
} from '@sluice/core/wire';
import { BookingClients } from '../clients/booking-clients.js';
import { ClientCounter } from '../clients/client-ids.js';
import { clockSkewView, storeTime, type ServerClock, type StoreTime } from '../clock-skew.js';
import { OverrideTable } from '../envoy/overrides.js';
import { shouldRateLimit, type RlsRequest, type RlsResponse } from '../envoy/rls.js';
import type { LiveRules } from '../live-rules.js';
import { SETTINGS } from '../settings.js';
import type { ClockSkewView } from '../stats/clock.js';
import { NO_ROLLOUT, type RolloutRouting } from './routing.js';

export type { DomainSplit, RolloutRouting } from './routing.js';

export type {
  AcquireItem,
  AdjustItem,
  BookItem,
  CancelItem,
  CheckItem,
  DecisionItem,
  OutcomeItem,
  ReleaseItem,
  RenewItem,
  ReserveItem,
} from '@sluice/core/wire';

/** What a reservation got: `granted` permits (0 when fewer than `min` were left). */
export interface ReserveAnswer {
  readonly granted: number;
  readonly decision: Decision;
  /** The stamp to return unused permits with (see `Limiter.reserve`). */
  readonly at: number;
}

/** One resource as remote clients see it (`GET /v1/resources`). */
export type ResourceView = ResourceBody;

/**
 * Places a key of a resource in a cohort (a rollout's `baseline` or `candidate`): its outcomes
 * are tallied under the cohort as well as under the resource. Undefined: in no cohort.
 */
export type CohortOf = (resource: string, key: string) => string | undefined;

/** Options of {@link RateLimitService}. */
export interface RateLimitServiceOptions {
  /** Live bookings per client, bounded (see {@link BookingClients}). @default 1000 per client, 10000 clients */
  readonly bookingClients?: BookingClients;
  /** Tally reported outcomes by cohort too. @default none */
  readonly cohortOf?: CohortOf;
  /** How a running rollout splits keys and Envoy domains between rule versions. @default no split */
  readonly rollout?: RolloutRouting;
  /** The limits of the Envoy limit overrides requests carry. @default a table with the settings' default bounds */
  readonly overrides?: OverrideTable;
  /** The clock-skew check (`time`, `clockSkew`). @default the embedded store's: nothing to measure */
  readonly clock?: ServerClock;
}

/** A fleet-wide breaker as `GET /v1/breakers` shows it. */
export interface BreakerView {
  readonly resource: string;
  /** As the store has it. */
  readonly state: CircuitState;
  readonly policy: FleetBreakerPolicy;
  /** Outcomes reported fleet-wide over the breaker's window (undefined: the store did not answer). */
  readonly window: OutcomeTotals | undefined;
  /** Probe permits this server was handed. */
  readonly probes: number;
  /** Reports of this server the store failed to take. */
  readonly errors: number;
}

/** Most fleet-wide breakers `GET /v1/breakers` lists (each is read from the store). */
export const MAX_LISTED_BREAKERS = 100;
/** A running rollout as remote clients see it: the split and the candidate's limits. */
export interface RolloutView extends RolloutBody {
  readonly id: string;
}

/** Most resources `GET /v1/resources` lists; rule files are bounded too, this bounds the answer. */
export const MAX_LISTED_RESOURCES = 10_000;

/**
 * The service: every operation of the HTTP API and of Envoy's `ShouldRateLimit`, over the
 * limiter, the active rules and the rollout in force. It knows resources, keys, domains and
 * descriptors, never a transport: the HTTP and gRPC servers decode a request, call it, and
 * encode its answer. Only resources of the active rules are served; everything else about an
 * item is the limiter's to validate and decide.
 */
export class RateLimitService {
  readonly #limiter: Limiter;
  readonly #rules: LiveRules;
  /** Live remote clients, for their fair shares while the service is away. */
  readonly clients: ClientCounter;
  readonly #cohortOf: CohortOf | undefined;
  readonly #rollout: RolloutRouting;
  readonly #bookings: BookingClients;
  readonly #overrides: OverrideTable;
  readonly #clock: ServerClock;

  constructor(
    limiter: Limiter,
    rules: LiveRules,
    clients: ClientCounter = new ClientCounter(),
    options: RateLimitServiceOptions = {},
  ) {
    this.#limiter = limiter;
    this.#rules = rules;
    this.clients = clients;
    this.#cohortOf = options.cohortOf;
    this.#rollout = options.rollout ?? NO_ROLLOUT;
    this.#bookings = options.bookingClients ?? new BookingClients({ perClient: 1000, clients: 10_000 });
    this.#overrides =
      options.overrides ??
      new OverrideTable({
        limiter,
        maxOverrides: Number(SETTINGS.maxOverrides.default),
        perMinute: Number(SETTINGS.overridesPerMinute.default),
        idleMs: Number(SETTINGS.overrideIdleMs.default),
      });
    this.#clock = options.clock ?? { monitor: undefined, thresholdMs: Number(SETTINGS.skewThresholdMs.default) };
  }

  /**
   * Envoy's `ShouldRateLimit` (see {@link shouldRateLimit}): the request's descriptors matched in
   * its domain of the active rules, split by the rollout in force.
   */
  async shouldRateLimit(request: RlsRequest): Promise<RlsResponse> {
    const rollout = this.#rollout;
    return shouldRateLimit(request, this.#limiter, this.#rules, this.#overrides, (domain) => rollout.domain?.(domain));
  }

  /** The store's clock as this server reads it (see {@link storeTime}). */
  time(): StoreTime {
    return storeTime(this.#clock);
  }

  /** The limit store's health as the limiter's failover sees it (`GET /v1/stats`, `health`). */
  storeHealth(): StoreHealth {
    return this.#limiter.storeHealth();
  }

  /** How far this server's clock is from the store's, as `GET /v1/stats` shows it. */
  clockSkew(): ClockSkewView {
    return clockSkewView(this.#clock);
  }

  /**
   * Takes the outcome of calls to a resource's downstream: judged by the resource's breaker
   * (fleet-wide ones in the store) and tallied, under the key's cohort as well when
   * `cohortOf` places it in one.
   */
  async outcome(item: OutcomeItem): Promise<{ recorded: true }> {
    this.#active(item.resource);
    const named = item.key === undefined ? undefined : this.#cohortOf?.(item.resource, item.key);
    const cohort = named === undefined ? undefined : checkCohort(named);
    this.#limiter.reportOutcome(item, cohort);
    return { recorded: true };
  }

  /** The active rule version (0 before the first). */
  get rulesVersion(): number {
    return this.#rules.version?.version ?? 0;
  }

  /**
   * The window of `item`'s limit `limitId` (the one that decided), in whole seconds rounded up, for
   * `RateLimit-Policy`'s `w`; undefined for a limit without one (concurrency) or not found.
   */
  windowSecondsOf(item: { readonly resource: string; readonly key?: string | undefined }, limitId: string): number | undefined {
    let limits;
    try {
      limits = this.#limiter.settingsOf(this.#name(item)).limits;
    } catch {
      return undefined;
    }
    const limit = limits.find((l) => l.id === limitId);
    return limit === undefined || limit.algorithm === 'concurrency' || !(limit.windowMs > 0)
      ? undefined
      : Math.ceil(limit.windowMs / 1000);
  }

  /**
   * The limits that decide `item` now: the version in force's, or, in a rollout's candidate
   * cohort, the candidate's; undefined for a resource the limiter does not have.
   */
  limitsOf(item: { readonly resource: string; readonly key?: string | undefined }): readonly CompiledLimit[] | undefined {
    try {
      return this.#limiter.settingsOf(this.#name(item)).limits;
    } catch {
      return undefined;
    }
  }

  /** Whose limits decide `item` while a rollout splits its resource (undefined when none does). */
  cohortOf(item: { readonly resource: string; readonly key?: string | undefined }): Cohort | undefined {
    return this.#rollout.cohortOf?.(item.resource, item.key);
  }

  async reserve(item: ReserveItem): Promise<ReserveAnswer> {
    this.#active(item.resource);
    const r = await this.#limiter.reserve(this.#name(item), { key: item.key, min: item.min, max: item.max, holdMs: item.holdMs });
    return { granted: r.granted, decision: r.decision, at: r.at };
  }

  async renew(item: RenewItem): Promise<{ renewed: boolean }> {
    this.#active(item.resource);
    return {
      renewed: await this.#limiter.renew(this.#name(item), {
        key: item.key,
        permitId: item.permitId,
        ...(item.ttlMs === undefined ? {} : { ttlMs: item.ttlMs }),
      }),
    };
  }

  /**
   * The active resources with what remote clients need: limits, lease settings, store-failure
   * policy; the rule version; how many remote clients are live. No secrets.
   */
  resources(): ResourcesBody & { rollout?: RolloutView } {
    const names = this.#rules.resourceNames().filter((n) => this.#limiter.has(n));
    const resources: Record<string, ResourceView> = {};
    for (const name of names.slice(0, MAX_LISTED_RESOURCES)) resources[name] = this.#view(name);
    const split = this.#rollout.split?.();
    const rollout: RolloutView | undefined =
      split === undefined
        ? undefined
        : {
            id: split.id,
            percent: split.percent,
            resources: Object.fromEntries(
              [...split.names].filter(([, n]) => this.#limiter.has(n)).map(([r, n]) => [r, this.#view(n)]),
            ),
          };
    return {
      version: this.rulesVersion,
      clients: this.clients.count(),
      truncated: names.length > MAX_LISTED_RESOURCES,
      resources,
      ...(rollout === undefined ? {} : { rollout }),
    };
  }

  #view(name: string): ResourceView {
    return encodeResource(this.#limiter.settingsOf(name));
  }

  /** A check, or with `book` a booking call of `client` (see {@link book}). */
  async check(item: CheckItem, client = ''): Promise<Decision> {
    this.#active(item.resource);
    const d =
      item.book !== undefined
        ? await this.#book({ ...item, id: item.book }, client, true)
        : await this.#limiter.try(this.#name(item), opts(item));
    this.#rollout.observe(item.resource, item.key, d.allowed, d.source);
    return d;
  }

  /**
   * Admits now, or books the earliest slot under `id` (the same id and token later claim it;
   * see `Limiter.book`). A client holding its most live bookings is refused
   * (`SLUICE_ERR_BOOKING_LIMIT`) unless the call names one it holds.
   */
  async book(item: BookItem, client = ''): Promise<Decision> {
    this.#active(item.resource);
    return this.#book(item, client, true);
  }

  /** Claims a booking, never making one (`Limiter.claim`). */
  async claim(item: BookItem, client = ''): Promise<Decision> {
    this.#active(item.resource);
    return this.#book(item, client, false);
  }

  async cancel(item: CancelItem, client = ''): Promise<{ cancelled: boolean }> {
    this.#active(item.resource);
    const cancelled = await this.#limiter.cancel(this.#name(item), {
      ...(item.key === undefined ? {} : { key: item.key }),
      id: item.id,
      ...(item.token === undefined ? {} : { token: item.token }),
    });
    if (cancelled) this.#bookings.forget(client, item);
    return { cancelled };
  }

  async #book(item: BookItem, client: string, create: boolean): Promise<Decision> {
    const options = { ...opts(item), id: item.id, ...(item.token === undefined ? {} : { token: item.token }) };
    if (!create) {
      const d = await this.#limiter.claim(this.#name(item), options);
      this.#bookings.settle(client, item, d);
      return d;
    }
    const placed = this.#bookings.admit(client, item);
    let d: Decision;
    try {
      d = await this.#limiter.book(this.#name(item), options);
    } catch (err) {
      // Refused or failed: the place it took is given back (one it held already is kept).
      if (placed) this.#bookings.forget(client, item);
      throw err;
    }
    this.#bookings.settle(client, item, d);
    return d;
  }

  /** Waits for `client` (its waits are bounded and take turns with other clients', see `AcquireOptions.client`). */
  async acquire(item: AcquireItem, signal: AbortSignal, client?: string): Promise<Decision> {
    this.#active(item.resource);
    const d = await this.#limiter.acquire(this.#name(item), {
      ...opts(item),
      signal,
      ...(client === undefined ? {} : { client }),
      ...(item.maxWaitMs === undefined ? {} : { maxWaitMs: item.maxWaitMs }),
    });
    this.#rollout.observe(item.resource, item.key, d.allowed, d.source);
    return d;
  }

  async release(item: ReleaseItem): Promise<{ released: boolean }> {
    this.#active(item.resource);
    return { released: await this.#limiter.release(this.#name(item), { key: item.key, permitId: item.permitId }) };
  }

  async adjust(item: AdjustItem): Promise<{ adjusted: true }> {
    this.#active(item.resource);
    await this.#limiter.adjust(this.#name(item), {
      key: item.key,
      delta: item.delta,
      ...(item.tenant === undefined ? {} : { tenant: item.tenant }),
      ...(item.at === undefined ? {} : { at: item.at }),
    });
    return { adjusted: true };
  }

  /**
   * The fleet-wide breakers of the active resources (the first {@link MAX_LISTED_BREAKERS}): each
   * one's state as the store has it, its settings, and its outcomes over its window (`window`
   * undefined when the store could not be read).
   */
  async breakers(): Promise<BreakerView[]> {
    const names = this.#rules.resourceNames().filter((n) => this.#limiter.has(n));
    const views: BreakerView[] = [];
    for (const resource of names) {
      // Each breaker costs store calls: a public read lists a bounded number of them.
      if (views.length >= MAX_LISTED_BREAKERS) break;
      const b = await this.#limiter.readFleetBreaker(resource);
      if (b === undefined) continue;
      let window: OutcomeTotals | undefined;
      try {
        window = await this.#limiter.outcomeTotals(resource, b.policy.windowMs);
      } catch {
        window = undefined;
      }
      views.push({ resource, state: b.state, policy: b.policy, window, probes: b.probes, errors: b.errors });
    }
    return views;
  }

  /** The hot keys of the active rules' resources that track them (see `Limiter.hotKeys`). */
  hotKeys(): HotKeyReport[] {
    return this.#limiter.hotKeys().filter((r) => this.#rules.has(r.resource));
  }

  /** The limiter resource of an item: its candidate's during a rollout, for the candidate cohort. */
  #name(item: { readonly resource: string; readonly key?: string | undefined }): string {
    return this.#rollout.route(item.resource, item.key);
  }

  #active(resource: string): void {
    if (!this.#rules.has(resource)) {
      throw new SluiceError(ErrorCodes.UNKNOWN_RESOURCE, `no limits configured for resource ${JSON.stringify(resource)}`, {
        field: 'resource',
      });
    }
  }
}

function opts(item: DecisionItem) {
  return {
    ...(item.key === undefined ? {} : { key: item.key }),
    ...(item.cost === undefined ? {} : { cost: item.cost }),
    ...(item.tenant === undefined ? {} : { tenant: item.tenant }),
    ...(item.priority === undefined ? {} : { priority: item.priority }),
  };
}
