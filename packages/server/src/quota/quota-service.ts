import { compileLimits, type CompiledLimit } from '@sluice/core';
import type { AdjustItem, ReserveItem } from '@sluice/core/wire';
import { matchQuotaBucket, type RuleSet } from '@sluice/rules';
import { ServerError, ServerErrorCodes } from '../errors.js';
import {
  DEFAULT_SHARE_SETTINGS,
  fairShares,
  permitsFor,
  ratePerSecond,
  strategyFor,
  wantsOf,
  type ShareSettings,
  type Strategy,
} from './shares.js';

/** A bucket as Envoy names it: a map of strings. */
export type BucketId = Readonly<Record<string, string>>;

/** One bucket's usage since its last report. */
export interface BucketUsage {
  readonly bucket: BucketId;
  /** Time since the bucket's last report, in ms (more than 0). */
  readonly elapsedMs: number;
  readonly allowed: number;
  readonly denied: number;
}

/** What the server tells an Envoy to do with one bucket. */
export type BucketAction =
  | { readonly kind: 'assign'; readonly bucket: BucketId; readonly strategy: Strategy; readonly ttlMs: number }
  | { readonly kind: 'abandon'; readonly bucket: BucketId };

/** What the quota service draws on: the active rules and the store, through the service. */
export interface QuotaDeps {
  /** The active rule set (its `quota` section and resources); undefined before the first. */
  readonly rules: () => RuleSet | undefined;
  readonly reserve: (item: ReserveItem) => Promise<{ readonly granted: number; readonly at: number }>;
  readonly adjust: (item: AdjustItem) => Promise<unknown>;
  /**
   * The limits that decide a key of a resource now (in a rollout's candidate cohort, the
   * candidate's); without it, or when it has none, the active rules' limits of the resource.
   */
  readonly limitsOf?: (resource: string, key: string) => readonly CompiledLimit[] | undefined;
  /** Milliseconds, for how stale a subscription is. */
  readonly now: () => number;
  /** Told of a bucket whose assignment failed (it is abandoned). */
  readonly onError?: (err: unknown) => void;
}

/** Options of {@link QuotaService}. */
export interface QuotaOptions extends Partial<ShareSettings> {
  /** Most buckets one stream may subscribe to. @default 1000 */
  readonly maxBuckets?: number;
  /** Shortest assignment. @default 1000 */
  readonly minTtlMs?: number;
  /** Longest assignment (at most a reservation's longest hold, 60 s). @default 60000 */
  readonly maxTtlMs?: number;
}

/** Most requests one bucket's report may count (allowed or denied): more is not a report of real traffic. */
export const MAX_REPORTED_REQUESTS = 1_000_000_000;

/** Subscribers of one key of a resource, on this server. */
interface Pool {
  readonly subs: Set<Subscription>;
  /**
   * The rate shared, when the store gave a subscriber less than its assignment needed (other
   * callers, other servers, or this pool's own holds fill the limit): cut on a shortfall,
   * recovering toward the resource's rate while none recurs. Undefined: the resource's rate.
   */
  storeRate: number | undefined;
  /** When `storeRate` was last recovered (ms). */
  storeRateAt: number;
  /** When it was last cut (ms). */
  cutAt: number;
}

/** A shortfall cuts the rate shared to this fraction of what it was (at most once a reporting interval). */
export const SHORTFALL_CUT = 0.75;
/** Without shortfalls, the rate shared recovers by this fraction of the resource's rate a second. */
export const RECOVERY_PER_SECOND = 0.1;
/** The rate shared is never cut below this fraction of the resource's rate. */
export const LOWEST_SHARED = 0.05;

/** @internal One stream's subscription to one bucket, and what is held in the store for it. */
export interface Subscription {
  readonly bucket: BucketId;
  pool: Pool;
  resource: string;
  key: string;
  /** Requests per second over its last report (allowed and denied). */
  demand: number;
  /** The resource's rate its last assignment was computed from (a rule change that moves it is pushed). */
  rate: number;
  intervalMs: number;
  reportedAt: number;
  /** Permits taken in the store for it and not yet reported as admitted (or returned). */
  held: number;
  /** The stamp of its newest reservation, and what of it may still be returned. */
  lastAt: number;
  lastGranted: number;
}

/** A bucket id as one string: its pairs sorted, each part length-prefixed. */
function bucketKey(b: BucketId): string {
  return Object.keys(b)
    .sort()
    .map((k) => `${k.length}:${k}${b[k]!.length}:${b[k]}`)
    .join('');
}

/**
 * Envoy's rate limit quota service, on one server: each bucket a stream subscribes to is matched
 * to a key of a resource (the rules' `quota` section), and every report hands the stream a new
 * assignment for it: a share of the resource's rate, max-min fair across this server's streams
 * on the same key by their reported demand (with headroom, and a floor so a new stream is served
 * at once). The permits an assignment can admit before it expires are taken in the store first,
 * as a lease's are, so Envoys and every other caller of the resource draw on one limit; what a
 * report shows unused beyond the next assignment is returned, and what it shows admitted beyond
 * what was held is charged. See docs/quota-service.md.
 */
export class QuotaService {
  readonly #deps: QuotaDeps;
  readonly #settings: ShareSettings;
  readonly #maxBuckets: number;
  readonly #minTtlMs: number;
  readonly #maxTtlMs: number;
  readonly #pools = new Map<string, Pool>();
  readonly #streams = new Set<QuotaStream>();
  readonly #limits = new WeakMap<object, readonly CompiledLimit[]>();

  constructor(deps: QuotaDeps, options: QuotaOptions = {}) {
    this.#deps = deps;
    this.#settings = {
      floorDivisor: options.floorDivisor ?? DEFAULT_SHARE_SETTINGS.floorDivisor,
      headroom: options.headroom ?? DEFAULT_SHARE_SETTINGS.headroom,
    };
    this.#maxBuckets = options.maxBuckets ?? 1000;
    this.#minTtlMs = options.minTtlMs ?? 1000;
    this.#maxTtlMs = Math.min(options.maxTtlMs ?? 60_000, 60_000);
  }

  /** Most buckets one stream may subscribe to. */
  get maxBuckets(): number {
    return this.#maxBuckets;
  }

  /** A new stream's subscriptions; `close()` it when the stream ends. */
  open(): QuotaStream {
    const stream = new QuotaStream(this, () => this.#streams.delete(stream));
    this.#streams.add(stream);
    return stream;
  }

  /**
   * A new rule version is active, or a rollout moved: every stream is told, between its reports,
   * of the buckets the change moves (abandoned when no rule matches them any more, a new
   * assignment when their resource, key or rate changed), rather than at each bucket's next report.
   */
  limitsChanged(): void {
    for (const stream of this.#streams) stream.refresh();
  }

  /** How many streams subscribe to each key (for tests and stats): `resource`, `key` -> count. */
  subscribers(resource: string, key = ''): number {
    return this.#pools.get(JSON.stringify([resource, key]))?.subs.size ?? 0;
  }

  /** @internal */
  join(sub: Subscription | undefined, bucket: BucketId, resource: string, key: string): Subscription {
    const poolKey = JSON.stringify([resource, key]);
    let pool = this.#pools.get(poolKey);
    if (pool === undefined) {
      pool = { subs: new Set(), storeRate: undefined, storeRateAt: 0, cutAt: -Infinity };
      this.#pools.set(poolKey, pool);
    }
    if (sub !== undefined && sub.pool === pool) return sub;
    if (sub !== undefined) this.leave(sub);
    const joined: Subscription = {
      bucket,
      pool,
      resource,
      key,
      demand: 0,
      rate: 0,
      intervalMs: 0,
      reportedAt: this.#deps.now(),
      held: 0,
      lastAt: 0,
      lastGranted: 0,
    };
    pool.subs.add(joined);
    return joined;
  }

  /**
   * @internal Ends a subscription. What is held for it stays taken: the Envoy may serve its
   * assignment until it expires.
   */
  leave(sub: Subscription): void {
    sub.pool.subs.delete(sub);
    if (sub.pool.subs.size === 0) this.#pools.delete(JSON.stringify([sub.resource, sub.key]));
  }

  /** @internal */
  get deps(): QuotaDeps {
    return this.#deps;
  }

  /** @internal The assignment's lifetime: twice the reporting interval, within the bounds. */
  ttlFor(intervalMs: number): number {
    return Math.min(this.#maxTtlMs, Math.max(this.#minTtlMs, Math.ceil(2 * intervalMs)));
  }

  /** @internal The rate (permits a second) of a key of a resource: by the limits deciding it now. */
  rateOf(rules: RuleSet, resource: string, key: string): number {
    return ratePerSecond(this.#deps.limitsOf?.(resource, key) ?? this.limitsOf(rules, resource));
  }

  /** @internal The compiled limits of a resource of the rule set. */
  limitsOf(rules: RuleSet, resource: string): readonly CompiledLimit[] {
    const rule = rules.resources[resource];
    if (rule === undefined) return [];
    let limits = this.#limits.get(rule);
    if (limits === undefined) {
      limits = compileLimits(rule.limits);
      this.#limits.set(rule, limits);
    }
    return limits;
  }

  /** The rate a pool shares now: the resource's, or less after a shortfall, recovering with time. */
  #sharedRate(pool: Pool, rate: number, now: number): number {
    if (pool.storeRate === undefined) return rate;
    const recovered = pool.storeRate + (rate * RECOVERY_PER_SECOND * Math.max(0, now - pool.storeRateAt)) / 1000;
    pool.storeRateAt = Math.max(pool.storeRateAt, now);
    if (recovered >= rate) {
      pool.storeRate = undefined;
      return rate;
    }
    pool.storeRate = recovered;
    return recovered;
  }

  /** @internal A new assignment for `sub` after its report of `allowed` admissions. */
  async assign(sub: Subscription, allowed: number, rules: RuleSet): Promise<BucketAction> {
    const { reserve, adjust } = this.#deps;
    const where = sub.key === '' ? { resource: sub.resource } : { resource: sub.resource, key: sub.key };
    sub.held -= allowed;
    if (sub.held < 0) {
      // Admitted beyond what was held (while an assignment was replaced, or by the Envoy's own
      // fallback before the first): charged now, so every admission is counted in the store.
      const over = -sub.held;
      sub.held = 0;
      await adjust({ ...where, delta: over });
    }
    const rate = this.rateOf(rules, sub.resource, sub.key);
    sub.rate = rate;
    const pool = sub.pool;
    const now = this.#deps.now();
    const shared = this.#sharedRate(pool, rate, now);
    const subs = [...pool.subs];
    const shares = fairShares(
      shared,
      wantsOf(
        rate,
        subs.map((s) => s.demand),
        this.#settings,
      ),
    );
    const share = shares[subs.indexOf(sub)] ?? 0;
    const ttlMs = this.ttlFor(sub.intervalMs);
    const target = share > 0 ? permitsFor(share, ttlMs) : 0;
    if (sub.held > target) {
      const back = Math.min(sub.held - target, sub.lastGranted);
      if (back > 0) {
        await adjust({ ...where, delta: -back, ...(sub.lastAt > 0 ? { at: sub.lastAt } : {}) });
        sub.held -= back;
        sub.lastGranted -= back;
      }
    } else if (sub.held < target) {
      const asked = target - sub.held;
      const r = await reserve({ ...where, min: 1, max: asked, holdMs: ttlMs });
      if (r.granted > 0) {
        sub.held += r.granted;
        sub.lastAt = r.at;
        sub.lastGranted = r.granted;
      }
      if (r.granted < asked && now - pool.cutAt >= sub.intervalMs) {
        // The store is full: share less, so the larger shares shrink and leave the smaller ones
        // (the first to be starved when whoever reserves first takes what the window frees) theirs.
        pool.storeRate = Math.max(rate * LOWEST_SHARED, shared * SHORTFALL_CUT);
        pool.storeRateAt = now;
        pool.cutAt = now;
      }
    }
    return { kind: 'assign', bucket: sub.bucket, strategy: strategyFor(share, sub.held, ttlMs), ttlMs };
  }
}

/**
 * The subscriptions of one RLQS stream. Its reports, and the refreshes a rule change asks for,
 * are taken one at a time, in order.
 */
export class QuotaStream {
  readonly #quota: QuotaService;
  readonly #onClose: () => void;
  readonly #subs = new Map<string, Subscription>();
  #domain: string | undefined;
  #closed = false;
  /** The report or refresh in progress (each waits for the one before). */
  #turn: Promise<unknown> = Promise.resolve();
  #refreshQueued = false;
  /** Told of the actions the server pushes between reports (after a rule change). */
  onPush: ((actions: BucketAction[]) => void) | undefined;

  constructor(quota: QuotaService, onClose: () => void) {
    this.#quota = quota;
    this.#onClose = onClose;
  }

  /** How many buckets the stream subscribes to. */
  get size(): number {
    return this.#subs.size;
  }

  /**
   * Takes one report: the first names the stream's domain (later ones name the same or none).
   * Answers an action per reported bucket (an assignment, or abandon when no rule matches it),
   * and abandons the stream's buckets it stopped reporting. Throws a `ServerError` for a report
   * the protocol or the bounds refuse (the stream is then to be closed).
   */
  report(domain: string, usages: readonly BucketUsage[]): Promise<BucketAction[]> {
    const run = this.#turn.then(() => this.#report(domain, usages));
    this.#turn = run.catch(() => undefined);
    return run;
  }

  /**
   * Queues a refresh after a rule change: each subscription the change moves is answered in one
   * push (`onPush`). At most one refresh waits at a time.
   */
  refresh(): void {
    if (this.#closed || this.#refreshQueued || this.onPush === undefined) return;
    this.#refreshQueued = true;
    const run = this.#turn.then(async () => {
      this.#refreshQueued = false;
      const actions = await this.#refresh();
      if (actions.length > 0 && !this.#closed) this.onPush?.(actions);
    });
    this.#turn = run.catch((err: unknown) => this.#quota.deps.onError?.(err));
  }

  async #refresh(): Promise<BucketAction[]> {
    const quota = this.#quota;
    const rules = quota.deps.rules();
    if (this.#closed || rules === undefined || this.#domain === undefined) return [];
    const actions: Promise<BucketAction>[] = [];
    for (const [id, sub] of [...this.#subs]) {
      const match = matchQuotaBucket(rules.quota, this.#domain, sub.bucket);
      if (match === undefined) {
        quota.leave(sub);
        this.#subs.delete(id);
        actions.push(Promise.resolve({ kind: 'abandon', bucket: sub.bucket }));
        continue;
      }
      const moved = match.resource !== sub.resource || match.key !== sub.key;
      if (!moved && quota.rateOf(rules, sub.resource, sub.key) === sub.rate) continue;
      const next = quota.join(sub, sub.bucket, match.resource, match.key);
      if (moved) {
        // What its last report showed carries over to the new key, until its next report.
        next.demand = sub.demand;
        next.intervalMs = sub.intervalMs;
      }
      this.#subs.set(id, next);
      actions.push(this.#assign(next, 0, rules));
    }
    return Promise.all(actions);
  }

  /** A new assignment for `sub`; a failure abandons its bucket. */
  #assign(sub: Subscription, allowed: number, rules: RuleSet): Promise<BucketAction> {
    const quota = this.#quota;
    return quota.assign(sub, allowed, rules).catch((err: unknown): BucketAction => {
      quota.deps.onError?.(err);
      quota.leave(sub);
      this.#subs.delete(bucketKey(sub.bucket));
      return { kind: 'abandon', bucket: sub.bucket };
    });
  }

  async #report(domain: string, usages: readonly BucketUsage[]): Promise<BucketAction[]> {
    if (this.#closed) return [];
    if (this.#domain === undefined) {
      if (domain === '') throw invalid('domain', 'the first report of a stream must name its domain');
      this.#domain = domain;
    } else if (domain !== '' && domain !== this.#domain) {
      throw invalid('domain', `a stream keeps the domain of its first report (${JSON.stringify(this.#domain)})`);
    }
    const quota = this.#quota;
    const { now: clock } = quota.deps;
    const now = clock();
    const rules = quota.deps.rules();
    const seen = new Set<string>();
    const actions: Promise<BucketAction>[] = [];
    let added = 0;
    for (const [i, u] of usages.entries()) {
      const id = bucketKey(u.bucket);
      if (seen.has(id)) throw invalid(`bucket_quota_usages[${i}].bucket_id`, 'names a bucket reported twice in one report');
      seen.add(id);
      if (!this.#subs.has(id)) added++;
    }
    if (this.#subs.size + added > quota.maxBuckets) {
      throw new ServerError(
        ServerErrorCodes.BATCH_TOO_LARGE,
        `a stream may subscribe to at most ${quota.maxBuckets} buckets, this report would make ${this.#subs.size + added}`,
      );
    }
    const reported: { sub: Subscription; allowed: number; at: number }[] = [];
    for (const u of usages) {
      const id = bucketKey(u.bucket);
      const old = this.#subs.get(id);
      const match = rules === undefined ? undefined : matchQuotaBucket(rules.quota, this.#domain, u.bucket);
      if (match === undefined) {
        if (old !== undefined) quota.leave(old);
        this.#subs.delete(id);
        actions.push(Promise.resolve({ kind: 'abandon', bucket: u.bucket }));
        continue;
      }
      const sub = quota.join(old, u.bucket, match.resource, match.key);
      this.#subs.set(id, sub);
      sub.demand = ((u.allowed + u.denied) * 1000) / u.elapsedMs;
      sub.intervalMs = u.elapsedMs;
      sub.reportedAt = now;
      reported.push({ sub, allowed: u.allowed, at: actions.length });
      // Its place in the answer, which keeps the report's order.
      actions.push(Promise.resolve({ kind: 'abandon', bucket: u.bucket }));
    }
    // Every demand of this report is in before any share is computed.
    for (const { sub, allowed, at } of reported) actions[at] = this.#assign(sub, allowed, rules!);
    // Buckets no longer reported for three of their intervals (and their assignment's time to live) are abandoned.
    for (const [id, sub] of this.#subs) {
      if (seen.has(id)) continue;
      if (now - sub.reportedAt > Math.max(3 * sub.intervalMs, quota.ttlFor(sub.intervalMs))) {
        quota.leave(sub);
        this.#subs.delete(id);
        actions.push(Promise.resolve({ kind: 'abandon', bucket: sub.bucket }));
      }
    }
    return Promise.all(actions);
  }

  /** Ends every subscription of the stream. */
  close(): void {
    if (!this.#closed) this.#onClose();
    this.#closed = true;
    for (const sub of this.#subs.values()) this.#quota.leave(sub);
    this.#subs.clear();
  }
}

function invalid(field: string, message: string): ServerError {
  return new ServerError(ServerErrorCodes.INVALID_REQUEST, `${field}: ${message}`, { field });
}
