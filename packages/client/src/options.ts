import { randomUUID } from 'node:crypto';
import {
  DEFAULT_MAX_KEY_LENGTH,
  ErrorCodes,
  compileResource,
  intOption,
  invalid,
  isTierName,
  resolveLogger,
  TIER_NAME,
  systemClock,
  type Clock,
  type LimiterObserver,
  type Logger,
} from '@sluice/core';
import type { ClientClockSkewOptions } from './clock-skew.js';
import type { Transport } from './transport.js';

/** Lease settings, as in rule files (`lease:`); see docs/leases.md. */
export type ClientLeaseSettings = { ttlMs?: number; maxBatch?: number; targetMs?: number; maxShare?: number } | true;

/** Options of {@link RemoteLimiter}. */
export interface RemoteLimiterOptions {
  /** Base URL of `sluice serve`'s HTTP API, e.g. `http://127.0.0.1:8080`. */
  url: string;
  /** How this client names itself to the service (counted for fair shares). @default a random UUID */
  clientId?: string;
  /**
   * The service's data-plane token (`sluice serve --api-token`), sent as `Authorization: Bearer`.
   * A service that requires one answers calls without it `SLUICE_ERR_UNAUTHORIZED`, thrown to the caller.
   */
  token?: string;
  /**
   * The token outcome reports (`reportOutcome`, `call`) are sent with, when the service takes
   * them under a credential of their own (`sluice serve --outcomes-token`; the admin token works
   * too). Reports steer the fleet's breakers, rollouts and adaptive limits. A refused report is
   * dropped and counted (`outcomeStats.dropped`), and the refusal is logged once.
   * @default `token`
   */
  outcomesToken?: string;
  /** Most keep-alive connections to the service. @default 16 */
  connections?: number;
  /**
   * TLS to an `https://` service (`sluice serve --tls-cert`): `ca`, the PEM CA bundle the
   * service's certificate must chain to (default: the system's); `cert` and `key`, this client's
   * certificate for a service that requires one (`--tls-client-ca`). Refused with an `http://` URL.
   */
  tls?: ClientTlsOptions;
  /**
   * The tier of this client's calls that name none (`TryOptions.priority`), e.g. `vip` for a
   * process that serves only VIP traffic. A tier name; the service says which tiers a resource
   * has (`SLUICE_ERR_UNKNOWN_TIER`). @default unset: each resource's default tier
   */
  priority?: string;
  /**
   * A fixed timeout of a check (and of book, claim, release, renew, adjust, reserve and cancel), in ms.
   * @default adaptive: 3 x the p99.9 of the last 1000 answers, between 100 ms and 1 s, doubled
   * after each timeout until an answer comes in time
   */
  checkTimeoutMs?: number;
  /**
   * Consecutive timed-out calls (calls in flight together count once) that switch this client
   * to its store-failure policy; each timed-out call is answered by the policy either way. An
   * unreachable service switches it at once.
   * @default 3
   */
  consecutiveFailures?: number;
  /** An acquire's HTTP call may take its wait bound plus this, in ms. @default 1000 */
  acquireMarginMs?: number;
  /** Default wait bound of `acquire`, in ms (the service refuses more than its own bound). @default 30000 */
  maxWaitMs?: number;
  /** Most checks (or bookings, or claims) in one batch request (keep it within the service's `--max-batch`). @default 100 */
  maxBatch?: number;
  /** Most checks, bookings and claims queued or in flight; beyond it calls are decided by the store-failure policy. @default 10000 */
  maxPending?: number;
  /** Longest time an outcome report (`reportOutcome`, `call`) waits before being sent, in ms. @default 200 */
  outcomeFlushMs?: number;
  /** Most outcome reports queued; more are dropped and counted (`outcomeStats.dropped`). @default 10000 */
  maxQueuedOutcomes?: number;
  /** @default 256 */
  maxKeyLength?: number;
  /** How often the resource list is re-read (rule changes also arrive with every answer). @default 1000 */
  rulesPollMs?: number;
  /**
   * Clients sharing the limits, for fair shares while the service is away: the service's own
   * count of recent clients is used when larger.
   * @default the service's count of its recent clients; until one was read, the `local` policy
   * denies (no share is known to be safe)
   */
  clients?: number;
  /**
   * Lease every resource that has no concurrency limit, even when its rules do not ask for
   * leases (rules that do keep their own settings).
   */
  lease?: ClientLeaseSettings;
  /** First probe of `/readyz` after a failure, in ms. @default 50 */
  probeIntervalMs?: number;
  /** Probes back off up to this, in ms. @default 500 */
  maxProbeIntervalMs?: number;
  /**
   * Where degradations are logged, each as one line when it starts and one when it ends (the
   * service unreachable and back, outcome reports not delivered, the resource list refused),
   * and the rule versions applied; a pino logger fits. `false` for nowhere.
   * @default degradations are written as JSON lines to stderr
   */
  logger?: Logger | false;
  /** Decision hooks, e.g. `createPrometheusObserver` of `@sluice/core/metrics`. */
  observer?: LimiterObserver;
  /** @default systemClock */
  clock?: Clock;
  /** How the service is reached. @default HTTP/1.1 keep-alive over an undici pool */
  transport?: Transport;
  /**
   * Measure this host's clock skew to the store's clock (through the service's `/v1/time`):
   * `true` or the check's settings. The monitor is the limiter's `clockSkew`; give it to age
   * checks (`clockSkew` of a gateway, a decision cache or an aggregator). Skew warnings go to
   * `logger`. Decisions never need it: the store decides on its own clock.
   * @default false
   */
  clockSkew?: boolean | ClientClockSkewOptions;
}

/** TLS settings of a {@link RemoteLimiterOptions}. */
export interface ClientTlsOptions {
  ca?: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
}

/** Validated {@link RemoteLimiterOptions}. */
export interface CompiledRemoteOptions {
  readonly url: string;
  readonly clientId: string;
  readonly token: string | undefined;
  /** Undefined: outcome reports are sent with `token`. */
  readonly outcomesToken: string | undefined;
  readonly connections: number;
  readonly tls: ClientTlsOptions | undefined;
  /** Undefined: adaptive. */
  readonly checkTimeoutMs: number | undefined;
  readonly consecutiveFailures: number;
  readonly acquireMarginMs: number;
  readonly maxWaitMs: number;
  readonly maxBatch: number;
  readonly maxPending: number;
  readonly outcomeFlushMs: number;
  readonly maxQueuedOutcomes: number;
  readonly maxKeyLength: number;
  readonly rulesPollMs: number;
  /** Undefined: the service's count. */
  readonly clients: number | undefined;
  readonly lease: ClientLeaseSettings | undefined;
  readonly probeIntervalMs: number;
  readonly maxProbeIntervalMs: number;
  /** The logger given (none for `false` or when omitted). */
  readonly logger: Logger | undefined;
  /** Where degradations are logged: the logger given, stderr by default, none for `false`. */
  readonly switchLogger: Logger | undefined;
  readonly observer: LimiterObserver | undefined;
  readonly clock: Clock;
  readonly transport: Transport | undefined;
  readonly priority: string | undefined;
}

export { intOption };

const CLIENT_ID = /^[A-Za-z0-9_.:-]{1,64}$/;
/** What an HTTP header value can carry as a bearer token. */
const TOKEN = /^[\x21-\x7e]{1,1024}$/;

/** Validates options, fills defaults, freezes. */
export function compileRemoteOptions(o: RemoteLimiterOptions): CompiledRemoteOptions {
  if (typeof o !== 'object' || o === null) throw invalid(ErrorCodes.INVALID_OPTIONS, 'options', 'must be an object');
  let url: URL;
  try {
    url = new URL(o.url);
  } catch {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'url', 'must be an http:// or https:// URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'url', 'must be an http:// or https:// URL');
  }
  // The client calls the service's API at the origin's root; a path, query or credentials would
  // be dropped without a word, so they are refused.
  if ((url.pathname !== '/' && url.pathname !== '') || url.search !== '' || url.hash !== '') {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      'url',
      `must be the service's origin (scheme, host and port) with no path, query or fragment, got ${JSON.stringify(o.url)}; a path prefix in front of the service is not supported`,
    );
  }
  if (url.username !== '' || url.password !== '') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'url', 'must not carry credentials: give the service token as `token`');
  }
  const clientId = o.clientId ?? randomUUID();
  if (typeof clientId !== 'string' || !CLIENT_ID.test(clientId)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'clientId', 'must be 1 to 64 characters of A-Z a-z 0-9 _ . : -');
  }
  if (o.token !== undefined && (typeof o.token !== 'string' || !TOKEN.test(o.token))) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'token', 'must be 1 to 1024 visible ASCII characters');
  }
  if (o.outcomesToken !== undefined && (typeof o.outcomesToken !== 'string' || !TOKEN.test(o.outcomesToken))) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'outcomesToken', 'must be 1 to 1024 visible ASCII characters');
  }
  if (o.lease !== undefined) {
    // Checked the way a rule's lease settings are.
    compileResource('client', { limits: { algorithm: 'fixed-window', limit: 1 }, lease: o.lease }, systemClock);
  }
  if (o.priority !== undefined && !isTierName(o.priority)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'priority', `must be a tier name (${TIER_NAME})`);
  }
  if (o.tls !== undefined) {
    if (typeof o.tls !== 'object' || o.tls === null) throw invalid(ErrorCodes.INVALID_OPTIONS, 'tls', 'must be an object');
    if (url.protocol !== 'https:') throw invalid(ErrorCodes.INVALID_OPTIONS, 'tls', 'needs an https:// url');
    if ((o.tls.cert === undefined) !== (o.tls.key === undefined)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'tls', 'cert and key go together: give both or neither');
    }
  }
  const probeIntervalMs = intOption(o.probeIntervalMs, 'probeIntervalMs', 50, 1, 60_000);
  return Object.freeze({
    url: url.origin,
    clientId,
    token: o.token,
    outcomesToken: o.outcomesToken,
    connections: intOption(o.connections, 'connections', 16, 1, 1024),
    tls: o.tls === undefined ? undefined : Object.freeze({ ...o.tls }),
    checkTimeoutMs: o.checkTimeoutMs === undefined ? undefined : intOption(o.checkTimeoutMs, 'checkTimeoutMs', 100, 1, 600_000),
    consecutiveFailures: intOption(o.consecutiveFailures, 'consecutiveFailures', 3, 1, 1000),
    acquireMarginMs: intOption(o.acquireMarginMs, 'acquireMarginMs', 1000, 0, 600_000),
    maxWaitMs: intOption(o.maxWaitMs, 'maxWaitMs', 30_000, 0, 24 * 3600 * 1000),
    maxBatch: intOption(o.maxBatch, 'maxBatch', 100, 1, 10_000),
    maxPending: intOption(o.maxPending, 'maxPending', 10_000, 1, 10_000_000),
    outcomeFlushMs: intOption(o.outcomeFlushMs, 'outcomeFlushMs', 200, 1, 60_000),
    maxQueuedOutcomes: intOption(o.maxQueuedOutcomes, 'maxQueuedOutcomes', 10_000, 1, 10_000_000),
    maxKeyLength: intOption(o.maxKeyLength, 'maxKeyLength', DEFAULT_MAX_KEY_LENGTH, 1, 65_536),
    rulesPollMs: intOption(o.rulesPollMs, 'rulesPollMs', 1000, 10, 3_600_000),
    clients: o.clients === undefined ? undefined : intOption(o.clients, 'clients', 1, 1, 1_000_000),
    lease: o.lease,
    probeIntervalMs,
    maxProbeIntervalMs: intOption(o.maxProbeIntervalMs, 'maxProbeIntervalMs', 500, probeIntervalMs, 600_000),
    logger: o.logger === false ? undefined : o.logger,
    switchLogger: resolveLogger(o.logger),
    observer: o.observer,
    clock: o.clock ?? systemClock,
    transport: o.transport,
    priority: o.priority,
  });
}
