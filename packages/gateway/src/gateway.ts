/**
 * The gateway: on each request, a synchronous check against the local decision cache (and,
 * for routes that ask for it, an exact limiter); a request a block rejects is answered 429 at
 * once and only counted (per block, see `Probe.reject`), any other request goes on and is
 * reported to the probe when its response ends. Framework adapters (node:http here, express and fastify beside it) only translate.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  ErrorCodes,
  RATE_LIMIT_HEADER_FORMS,
  clockOffsetOption,
  invalid,
  storeClock,
  systemClock,
  type Clock,
  type ClockOffset,
  type Decision,
  type RateLimitHeaderForm,
  type RateLimiter,
} from '@sluice/core';
import { EventOutcome, hashRange, hashValue, type AggregatorAnnouncement, type EventTransport } from '@sluice/stream';
import { DecisionCache, type ActiveBlock, type DecisionCacheOptions } from './decision-cache.js';
import {
  compileDimensions,
  compileSelector,
  firstSegmentEnd,
  hashBounded,
  pathEnd,
  rawUrl,
  type DimensionOptions,
  type RequestValue,
  type ValueSelector,
} from './dimensions.js';
import { blockHeaders, limiterHeaders, toSeconds, type PolicyAdvert } from './headers.js';
import type { GatewayObserver } from './observer.js';
import { fnOption, intOption } from './options.js';
import { Probe, type ProbeOptions } from './probe.js';

/** Options of the probe inside a {@link Gateway}. */
export type GatewayProbeOptions = Omit<ProbeOptions, 'transport' | 'clock' | 'wallClock' | 'observer'>;
/** Options of the decision cache inside a {@link Gateway}. */
export type GatewayCacheOptions = Omit<DecisionCacheOptions, 'clock' | 'wallClock' | 'observer' | 'clockSkew' | 'onAnnouncement'>;

/** Options of {@link Gateway}. */
export interface GatewayOptions {
  /**
   * The event stream: events are published to it and decisions are received from it (after
   * {@link Gateway.start}). Without one, no events are sent and decisions come only through
   * `gateway.cache.apply()`. The gateway never closes it.
   */
  transport?: EventTransport;
  /** Probe settings, or `false` to send no events. */
  probe?: GatewayProbeOptions | false;
  /** Decision cache settings. */
  cache?: GatewayCacheOptions;
  /** How each dimension of a request is read. */
  dimensions?: DimensionOptions;
  /** Values (path, user, header, IP, limiter key) are cut to this many characters before use. @default 256 */
  maxValueLength?: number;
  /** What `RateLimit-Policy` advertises for a governance rule, by rule id. @default quota 0, window = the block's retry-after */
  policies?: Readonly<Record<string, PolicyAdvert>>;
  /**
   * Which rate-limit header fields answers carry: the IETF draft's `RateLimit-Policy` /
   * `RateLimit` (`draft`), the earlier drafts' `RateLimit-Limit` / `-Remaining` / `-Reset`
   * (`legacy`), or `both`. `Retry-After` is always sent on a 429. @default 'draft'
   */
  headers?: RateLimitHeaderForm;
  /** Monotonic clock (block expiry, probe timers). @default systemClock */
  clock?: Clock;
  /** Wall clock, epoch ms (event timestamps, decision staleness). @default Date.now */
  wallClock?: () => number;
  /**
   * This host's measured offset to the store's clock (a `ClockSkewMonitor` of `@sluice/core`):
   * events are stamped and decision ages checked on the store's clock (`wallClock() + offsetMs`).
   * @default none: the wall clock
   */
  clockSkew?: ClockOffset;
  /** Metrics hooks; see `@sluice/gateway/metrics` for Prometheus. */
  observer?: GatewayObserver;
}

/** An exact limit a route checks after the decision cache: `trySync` first, then `try`. */
export interface LimitOptions {
  limiter: RateLimiter;
  /** The limiter resource. */
  resource: string;
  /**
   * The key within the resource (user, tenant, ...): a header (`{ header: 'x-tenant' }`) or a
   * function, as for the user and tenant dimensions. A request without one counts against the
   * whole resource. @default the whole resource
   */
  key?: ValueSelector;
  /** Permits per request. @default 1 */
  cost?: number;
}

/** Per-route settings. */
export interface RouteOptions {
  /** The resource of this route (overrides the gateway's resource dimension). */
  resource?: string;
  /** The route template, e.g. `/orders/:id` (overrides the path dimension). */
  path?: string;
  /** An exact limit checked after the decision cache. */
  limit?: LimitOptions;
}

/** A route's {@link LimitOptions} once compiled: its key selector is a reader. */
export interface CompiledRouteLimit extends LimitOptions {
  readonly key?: RequestValue;
}

/** A route compiled by {@link Gateway.route}: its fixed values hashed once. */
export interface Route {
  readonly resource: number;
  readonly path: number;
  readonly limit: CompiledRouteLimit | undefined;
}

/** An answer the gateway gives instead of the application. */
export interface Rejection {
  readonly status: 429;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** What a request's response end reports. */
interface Tracked {
  resource: number;
  path: number;
  user: number;
  ip: number;
  tenant: number;
  probe: Probe;
}

const kTracked = Symbol('sluice.gateway.tracked');
type TrackedResponse = ServerResponse & { [kTracked]?: Tracked };

/** One listener for every response: it reads what to report from the response itself. */
function onResponseClose(this: TrackedResponse): void {
  const t = this[kTracked];
  if (t === undefined) return;
  this[kTracked] = undefined;
  const finished = this.writableFinished;
  const status = this.headersSent ? this.statusCode : 0;
  const outcome = !finished || status >= 500 ? EventOutcome.ERROR : EventOutcome.PASSED;
  t.probe.emit(t.resource, t.path, t.user, t.ip, t.tenant, status > 999 ? 0 : status, outcome);
}

const NO_ROUTE: Route = Object.freeze({ resource: 0, path: 0, limit: undefined });
/** The resource of a request whose path has no first segment. */
const ROOT_HASH = hashValue('/');
/** Rejections for blocks are shared per (policy, seconds): a flood of blocked requests builds no strings. */
const MAX_CACHED_REJECTIONS = 1024;

/**
 * The framework-neutral gateway. One per process, shared by every route.
 *
 * @example
 * const gateway = new Gateway({ transport, dimensions: { user: { header: 'x-user-id' } } });
 * await gateway.start();
 * http.createServer(gateway.wrap((req, res) => res.end('ok'))).listen(8080);
 */
export class Gateway {
  /** The local decision cache (apply decisions by hand when there is no transport). */
  readonly cache: DecisionCache;
  /** The event probe, unless disabled or without a transport. */
  readonly probe: Probe | undefined;
  readonly #transport: EventTransport | undefined;
  readonly #dims: ReturnType<typeof compileDimensions>;
  readonly #maxLength: number;
  readonly #policies: Readonly<Record<string, PolicyAdvert>>;
  readonly #headers: RateLimitHeaderForm;
  readonly #observer: GatewayObserver | undefined;
  readonly #resourceHash: number;
  readonly #rejections = new Map<string, Rejection>();
  #started: Promise<void> | undefined;
  #closed = false;

  constructor(options: GatewayOptions = {}) {
    const clock = options.clock ?? systemClock;
    this.#observer = options.observer;
    this.#maxLength = intOption(options.maxValueLength, 'maxValueLength', 256, 1, 65_536);
    this.#dims = compileDimensions(options.dimensions);
    this.#policies = { ...(options.policies ?? {}) };
    if (options.headers !== undefined && !RATE_LIMIT_HEADER_FORMS.includes(options.headers)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'headers', `must be one of ${RATE_LIMIT_HEADER_FORMS.join(', ')}`);
    }
    this.#headers = options.headers ?? 'draft';
    this.#transport = options.transport;
    this.#resourceHash = this.#dims.resourceName === undefined ? 0 : hashBounded(this.#dims.resourceName, this.#maxLength);
    const skew = clockOffsetOption(options.clockSkew, 'clockSkew');
    const wallClock =
      skew === undefined ? options.wallClock : storeClock(fnOption(options.wallClock, 'wallClock') ?? Date.now, skew);
    const common = { clock, observer: options.observer, ...(wallClock ? { wallClock } : {}) };
    const probe =
      options.transport !== undefined && options.probe !== false
        ? new Probe({ ...options.probe, ...common, transport: options.transport })
        : undefined;
    this.probe = probe;
    // Aggregators announce how they split the stream; the probe checks it against its own.
    const onAnnouncement = probe === undefined ? undefined : (a: AggregatorAnnouncement) => void probe.checkAnnouncement(a);
    this.cache = new DecisionCache({ ...options.cache, ...common, ...(onAnnouncement ? { onAnnouncement } : {}) });
  }

  /** Subscribes the decision cache to the transport's broadcast. Idempotent. */
  start(): Promise<void> {
    this.#started ??= this.#transport === undefined ? Promise.resolve() : this.cache.subscribe(this.#transport);
    return this.#started;
  }

  /** Compiles per-route settings (hashes fixed values once). */
  route(options: RouteOptions = {}): Route {
    if (options.resource !== undefined && (typeof options.resource !== 'string' || options.resource === '')) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'route.resource', 'must be a non-empty string');
    }
    if (options.path !== undefined && typeof options.path !== 'string') {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'route.path', 'must be a string');
    }
    const limit = options.limit;
    if (limit !== undefined) {
      if (typeof limit.limiter?.trySync !== 'function' || typeof limit.limiter.try !== 'function') {
        throw invalid(ErrorCodes.INVALID_OPTIONS, 'route.limit.limiter', 'must be a RateLimiter');
      }
      if (typeof limit.resource !== 'string' || limit.resource === '') {
        throw invalid(ErrorCodes.INVALID_OPTIONS, 'route.limit.resource', 'must be a non-empty string');
      }
    }
    const key = limit === undefined ? undefined : compileSelector(limit.key, 'route.limit.key');
    return Object.freeze({
      resource: options.resource === undefined ? 0 : hashBounded(options.resource, this.#maxLength),
      path: options.path === undefined ? 0 : hashBounded(options.path, this.#maxLength),
      limit: limit === undefined ? undefined : { ...limit, key },
    });
  }

  /**
   * Decides a request: `undefined` to let it through (its response will be reported), a
   * {@link Rejection} to answer instead, or a promise of either when the route's limiter needs
   * a round trip. `template` is the framework's route template, if it knows one. Adapters call
   * this; applications use `handle`, `wrap`, `expressMiddleware`, `fastifyOnRequest` or `registerFastify`.
   */
  evaluate(
    req: IncomingMessage,
    res: ServerResponse,
    route: Route = NO_ROUTE,
    template?: string,
  ): Rejection | undefined | Promise<Rejection | undefined> {
    const max = this.#maxLength;
    const dims = this.#dims;
    // The string the path dimension comes from, and where its path part ends.
    let source: string | undefined;
    let end = 0;
    let path = route.path;
    if (path === 0 && dims.path !== false) {
      if (dims.path !== undefined) {
        source = dims.path(req) ?? '';
        end = source.length;
      } else if (template !== undefined) {
        source = template;
        end = template.length;
      } else {
        source = rawUrl(req);
        end = pathEnd(source);
      }
      path = hashRange(source, 0, end < max ? end : max);
    }
    let resource = route.resource || this.#resourceHash;
    if (resource === 0) {
      if (dims.resource !== undefined) {
        resource = hashBounded(dims.resource(req), max) || ROOT_HASH;
      } else {
        if (source === undefined) {
          source = template ?? rawUrl(req);
          end = template === undefined ? pathEnd(source) : source.length;
        }
        const segment = firstSegmentEnd(source, end);
        resource = hashRange(source, 0, segment < max ? segment : max) || ROOT_HASH;
      }
    }
    const user = dims.user === undefined ? 0 : hashBounded(dims.user(req), max);
    const ip = dims.ip === undefined ? 0 : hashBounded(dims.ip(req), max);
    const tenant = dims.tenant === undefined ? 0 : hashBounded(dims.tenant(req), max);

    const block = this.cache.match(resource, path, user, ip, tenant);
    if (block !== undefined) {
      this.#observer?.requestBlocked?.(block.dimension);
      // The aggregators keep the block while the load it holds back stays over the rule.
      if (!this.#closed) this.probe?.reject(resource, path, block.dimension, block.value);
      return this.#blockRejection(block);
    }
    if (this.probe !== undefined && !this.#closed) {
      const r = res as TrackedResponse;
      r[kTracked] = { resource, path, user, ip, tenant, probe: this.probe };
      r.on('close', onResponseClose);
    }
    return route.limit === undefined ? undefined : this.#limit(req, res, route.limit);
  }

  /**
   * node:http: checks the decision cache and answers 429 itself when blocked. Returns true when
   * the request may go on. Synchronous: a route's exact limiter is not consulted (use
   * {@link wrap} for that).
   */
  handle(req: IncomingMessage, res: ServerResponse, route?: Route): boolean {
    const verdict = this.evaluate(
      req,
      res,
      route === undefined ? NO_ROUTE : route.limit === undefined ? route : { ...route, limit: undefined },
    );
    if (verdict === undefined) return true;
    writeRejection(res, verdict as Rejection);
    return false;
  }

  /**
   * node:http: wraps a request handler so that it only sees requests the gateway lets through
   * (the route's exact limiter included).
   */
  wrap(
    handler: (req: IncomingMessage, res: ServerResponse) => unknown,
    route?: RouteOptions,
  ): (req: IncomingMessage, res: ServerResponse) => void {
    const compiled = this.route(route);
    return (req, res) =>
      settle(
        this.evaluate(req, res, compiled),
        () => void handler(req, res),
        (r) => writeRejection(res, r),
      );
  }

  /** Stops the probe (flushing within its bound) and the decision subscription. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#started?.catch(() => undefined);
    await this.probe?.close();
    await this.cache.close();
  }

  #blockRejection(block: ActiveBlock): Rejection {
    const retry = toSeconds(block.retryAfterMs > 0 ? block.retryAfterMs : block.remainingMs, 1);
    const cacheKey = `${retry}|${block.ruleId}`;
    let rejection = this.#rejections.get(cacheKey);
    if (rejection === undefined) {
      const policy = block.ruleId === '' ? 'governance' : block.ruleId;
      rejection = Object.freeze({
        status: 429,
        headers: Object.freeze({
          ...blockHeaders(policy, retry, this.#policies[block.ruleId], this.#headers),
          'content-type': 'application/json',
        }),
        body: JSON.stringify({ error: 'too_many_requests', policy, retryAfterSeconds: retry }),
      });
      if (this.#rejections.size >= MAX_CACHED_REJECTIONS) this.#rejections.clear();
      this.#rejections.set(cacheKey, rejection);
    }
    return rejection;
  }

  #limit(
    req: IncomingMessage,
    res: ServerResponse,
    limit: CompiledRouteLimit,
  ): Rejection | undefined | Promise<Rejection | undefined> {
    let options: { key?: string; cost?: number } | undefined;
    try {
      const rawKey = limit.key?.(req);
      const key = rawKey === undefined || rawKey === '' ? undefined : rawKey.slice(0, this.#maxLength);
      options = key === undefined && limit.cost === undefined ? undefined : { key, cost: limit.cost };
      const sync = limit.limiter.trySync(limit.resource, options);
      if (sync !== undefined) return this.#limiterVerdict(res, limit.resource, sync);
      return Promise.resolve(limit.limiter.try(limit.resource, options)).then(
        (d) => this.#limiterVerdict(res, limit.resource, d),
        (err: unknown) => {
          this.#observer?.limiterFailed?.(err);
          return undefined;
        },
      );
    } catch (err) {
      // The exact limit is an extra: when it fails the request goes on (the limiter's own
      // store-failure policy decides what it answers while its store is away).
      this.#observer?.limiterFailed?.(err);
      return undefined;
    }
  }

  #limiterVerdict(res: ServerResponse, resource: string, d: Decision): Rejection | undefined {
    const headers = limiterHeaders(resource, d, this.#headers);
    if (d.allowed) {
      if (!res.headersSent) for (const name in headers) res.setHeader(name, headers[name]!);
      return undefined;
    }
    this.#observer?.requestBlocked?.('limiter');
    const retry = headers['retry-after']!;
    return {
      status: 429,
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ error: 'too_many_requests', policy: resource, retryAfterSeconds: Number(retry) }),
    };
  }
}

/**
 * Acts on a verdict of {@link Gateway.evaluate}, now or when its limiter answers: `pass` lets
 * the request go on, `refuse` answers the rejection. A failed limiter lets the request go on.
 */
export function settle(
  verdict: Rejection | undefined | Promise<Rejection | undefined>,
  pass: () => void,
  refuse: (rejection: Rejection) => void,
): void {
  if (verdict === undefined) {
    pass();
  } else if (verdict instanceof Promise) {
    verdict.then(
      (v) => (v === undefined ? pass() : refuse(v)),
      () => pass(),
    );
  } else {
    refuse(verdict);
  }
}

/** Writes a {@link Rejection} on a node:http response (unless something was written already). */
export function writeRejection(res: ServerResponse, rejection: Rejection): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  res.writeHead(rejection.status, rejection.headers);
  res.end(rejection.body);
}
