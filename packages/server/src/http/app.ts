import type { AdaptiveStatus } from '../control/adaptive/controller.js';
import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HotKeyReport } from '@sluice/core';
import type { DecisionTracing } from '@sluice/core/otel';
import type { RuleStore } from '@sluice/rules';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { limitConnections } from '../clients/connections.js';
import type { TlsMaterial } from '../tls.js';
import { ServerError, ServerErrorCodes } from '../errors.js';
import { FairTurns, finishOnClose, requestCost } from '../fair-turns.js';
import type { LiveRules } from '../live-rules.js';
import { WarningThrottle } from '../logging.js';
import type { ServerMetrics } from '../metrics.js';
import type { RateLimitService } from '../service/service.js';
import { SETTINGS, type Settings } from '../settings.js';
import { registerAdmin } from './admin.js';
import { registerApi } from './api.js';
import { authorized } from '../auth/auth.js';
import { answerClientError, trackResponse } from './client-errors.js';
import { registerDashboard } from './dashboard.js';
import type { RolloutRunner } from '../rollout/runner.js';
import { registerRolloutSummary } from './rollout.js';
import { healthView, type DecisionLatency } from '../stats/health.js';
import { fromFastifyError, sendError } from './reply.js';

/** Numeric settings the app may be given or not (their defaults are the settings' defaults). */
type DefaultedSetting = 'bodyTimeoutMs' | 'idleTimeoutMs' | 'maxConnections' | 'maxClientConnections' | 'maxOutcomeCalls';

function defaulted(given: Partial<Pick<Settings, DefaultedSetting>>): Pick<Settings, DefaultedSetting> {
  const or = (v: number | undefined, name: DefaultedSetting) => v ?? Number(SETTINGS[name].default);
  return {
    bodyTimeoutMs: or(given.bodyTimeoutMs, 'bodyTimeoutMs'),
    idleTimeoutMs: or(given.idleTimeoutMs, 'idleTimeoutMs'),
    maxConnections: or(given.maxConnections, 'maxConnections'),
    maxClientConnections: or(given.maxClientConnections, 'maxClientConnections'),
    maxOutcomeCalls: or(given.maxOutcomeCalls, 'maxOutcomeCalls'),
  };
}

/** What the HTTP app is built from. */
export interface HttpDeps {
  /** Serve HTTPS with this key pair (and client CA, for mutual TLS). @default plaintext HTTP */
  readonly tls?: TlsMaterial;
  readonly settings: Pick<Settings, 'maxBodyBytes' | 'maxBatch' | 'maxKeyLength' | 'maxWaitMs' | 'adminToken'> &
    Partial<
      Pick<Settings, 'apiToken' | 'outcomesToken' | 'openOutcomes' | 'maxClientQueued' | 'rateLimitHeaders' | DefaultedSetting>
    >;
  readonly service: RateLimitService;
  readonly rules: LiveRules;
  readonly ruleStore: RuleStore;
  readonly metrics: ServerMetrics;
  readonly logger: Logger;
  /** Warnings outsiders can repeat at will. @default one of the app's own, closed with it */
  readonly warnings?: WarningThrottle;
  /** Readiness: rules active and stores answering; the reasons when not. */
  /** `ready` picks 200 or 503; `status` (default `ready`/`not ready`) and `checks` make the body. */
  readonly readiness: () => Promise<{ ready: boolean; status?: string; checks: Record<string, string> }>;
  /** True once the server is shutting down. */
  readonly closing?: () => boolean;
  /** The adaptive limits of the active rules, for `/v1/stats`. */
  readonly adaptive?: () => Promise<readonly AdaptiveStatus[]>;
  /**
   * The p99 of decision latency for `/v1/stats` (`health.decisionP99Seconds`), from the
   * server's decision-duration histogram. @default none: the field is left out
   */
  readonly decisionLatency?: DecisionLatency;
  /**
   * Serve the web dashboard at `/dashboard`.
   * @default false
   */
  readonly dashboard?: boolean;
  /** The fleet's rollout: `GET /v1/rollout` and the admin API's `/v1/admin/rollout` routes. */
  readonly rollout?: RolloutRunner;
  /**
   * Where the API's requests wait for their turn, shared with the gRPC listener so that an
   * address's work on both counts as one. @default one of the app's own, closed with it
   */
  readonly turns?: FairTurns;
  /** A span per decision request (`check`, `acquire`, `book`, `claim`). @default none */
  readonly tracing?: DecisionTracing;
  /**
   * The figures of every worker of `sluice serve --workers N`, for `/metrics` and `/v1/stats`.
   * @default this process' own
   */
  readonly fleet?: FleetFigures;
}

/** What `/metrics` and `/v1/stats` answer when the server is one of several workers. */
export interface FleetFigures {
  /** The Prometheus text of every worker, merged. */
  metrics(): Promise<{ readonly text: string; readonly contentType: string }>;
  /** The `/v1/stats` body of every worker, merged (`admin`: with the hot keys named). */
  stats(admin: boolean): Promise<object>;
}

/** The `/v1/stats` body of this process: its resources' figures, health and hot keys. */
export async function statsOf(deps: HttpDeps, admin: boolean) {
  return {
    at: Date.now(),
    version: deps.rules.version?.version ?? 0,
    resources: deps.metrics.stats((r) => deps.rules.has(r)),
    ...(deps.adaptive === undefined ? {} : { adaptive: await deps.adaptive() }),
    clockSkew: deps.service.clockSkew(),
    // The store, what answers while it is away, and the server's own figures (`sluice status`'s first line).
    health: healthView(deps.service.storeHealth(), deps.service.clients.count(), deps.decisionLatency),
    // The heaviest keys of resources configuring `hotKeys` (see docs/control-plane.md, "Hot keys").
    // Keys are the callers' data (user ids, tenants): named only to the admin.
    hotKeys: hotKeysFor(deps.service.hotKeys(), admin),
  };
}

/**
 * The HTTP side of the server: the JSON API, the admin API, `/metrics`, `/v1/stats`,
 * `/healthz`, `/readyz` and (with `dashboard`) the web dashboard. Every error, fastify's own included, is answered by
 * {@link sendError}.
 */
export function buildHttpApp(deps: HttpDeps): FastifyInstance {
  const { settings, logger, metrics } = deps;
  const limits = defaulted(settings);
  const ownWarnings = deps.warnings === undefined;
  const warnings = deps.warnings ?? new WarningThrottle(logger, (event) => metrics.warning(event));
  const faults = warnings.faults('request_failed');
  const ownTurns = deps.turns === undefined;
  const turns =
    deps.turns ?? new FairTurns(settings.maxClientQueued === undefined ? {} : { maxClientQueued: settings.maxClientQueued });
  const cut = (reason: Parameters<typeof metrics.connectionClosed>[1]) => metrics.connectionClosed('http', reason);
  /** Each request's response, for following it until its answer is out. */
  const responses = new WeakMap<IncomingMessage, ServerResponse>();
  // Typed as fastify's logger, so the instance has fastify's default type.
  const fastifyLogger: FastifyBaseLogger = logger;
  const app = Fastify({
    ...(deps.tls === undefined ? {} : { https: deps.tls }),
    loggerInstance: fastifyLogger,
    // A rate limiter answers every request of its clients: per-request log lines would drown the rest.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: settings.maxBodyBytes,
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    // Receiving a request (head and body) is bounded; answering it is not: an acquire's wait
    // is bounded by maxWaitMs, and Node's request timeout ends once the request is received.
    requestTimeout: limits.bodyTimeoutMs,
    keepAliveTimeout: limits.idleTimeoutMs,
    http: {
      headersTimeout: limits.bodyTimeoutMs,
      // Node checks the timeouts on this period (30 s by default, which would triple a 10 s bound).
      connectionsCheckingInterval: Math.max(100, Math.min(1000, Math.floor(limits.bodyTimeoutMs / 4))),
    },
    frameworkErrors: (err, _request, reply) => {
      void sendError(reply, fromFastifyError(err), faults);
    },
    // Requests Node's HTTP parser refuses (or that did not arrive in time) never reach a route;
    // they still get the error format, after the answers to the requests pipelined before them.
    clientErrorHandler: (err, socket) => answerClientError(err, socket, cut),
  });
  limitConnections(app.server, limits, {
    cut,
    open: (delta) => metrics.connectionsOpen('http', delta),
    accept: (socket) => turns.connected(socket.remoteAddress ?? ''),
  });
  app.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    trackResponse(res);
    responses.set(req, res);
  });
  if (ownWarnings) app.addHook('onClose', async () => warnings.close());
  if (ownTurns) app.addHook('onClose', async () => turns.close());

  // JSON only, parsed here so that every parse failure has the server's error code.
  app.removeContentTypeParser(['application/json', 'text/plain']);
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, raw, done) => {
    const charset = charsetOf(request.headers['content-type']);
    if (charset !== undefined && !UTF8.test(charset)) {
      done(
        new ServerError(ServerErrorCodes.UNSUPPORTED_MEDIA_TYPE, `the body must be UTF-8, not charset=${charset.slice(0, 32)}`, {
          field: 'content-type',
        }),
        undefined,
      );
      return;
    }
    const bytes = typeof raw === 'string' ? Buffer.from(raw) : raw;
    // Decoding would turn invalid bytes into U+FFFD and merge keys that differ only in them.
    if (!isUtf8(bytes)) {
      done(new ServerError(ServerErrorCodes.MALFORMED_BODY, 'the body is not valid UTF-8'), undefined);
      return;
    }
    const parse = () => {
      const body = bytes.toString('utf8');
      if (body.trim() === '') {
        done(new ServerError(ServerErrorCodes.MALFORMED_BODY, 'the body is empty; send a JSON object'), undefined);
        return;
      }
      try {
        done(null, JSON.parse(body));
      } catch (err) {
        const why = err instanceof Error ? err.message.split('\n')[0] : 'invalid JSON';
        done(new ServerError(ServerErrorCodes.MALFORMED_BODY, `the body is not valid JSON: ${why}`), undefined);
      }
    };
    // The API's requests are parsed, decided and answered in their address's turn (FairTurns);
    // the admin API's are not shared out.
    if (request.routeOptions.config.turns !== true) {
      parse();
      return;
    }
    try {
      // In flight until its answer is written (or its connection closed): see FairTurns'
      // MAX_IN_FLIGHT. Not a call that waits for a permit: its wait is bounded by its own maxWaitMs.
      const res = request.routeOptions.config.waits === true ? undefined : responses.get(request.raw);
      turns.enter(
        request.ip,
        requestCost(bytes.length),
        parse,
        res && ((finish) => finishOnClose(res, res.writableFinished || res.destroyed, finish)),
      );
    } catch (err) {
      done(err as Error, undefined);
    }
  });

  app.setErrorHandler((err, _request, reply) => sendError(reply, fromFastifyError(err), faults));
  app.setNotFoundHandler((request, reply) =>
    sendError(
      reply,
      new ServerError(ServerErrorCodes.NOT_FOUND, `no endpoint ${request.method} ${request.url.split('?')[0]}`),
      faults,
    ),
  );
  // While shutting down, answers close their connection: keep-alive clients would otherwise
  // hold the server open after their last answer.
  // Callback hooks: an async one costs every request a promise and its microtask turns.
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (deps.closing?.()) reply.header('connection', 'close');
    done(null, payload);
  });
  app.addHook('onResponse', (request, reply, done) => {
    // Timed from fastify's own reading of the request's start (the getter reads the clock once).
    metrics.httpRequest(request.routeOptions.url ?? 'unmatched', request.method, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });

  registerApi(
    app,
    deps.service,
    settings,
    faults,
    {
      apiToken: settings.apiToken,
      outcomesToken: settings.outcomesToken,
      adminToken: settings.adminToken,
      openOutcomes: settings.openOutcomes,
      maxOutcomeCalls: limits.maxOutcomeCalls,
    },
    turns,
    settings.rateLimitHeaders ?? 'draft',
    deps.tracing,
  );
  registerAdmin(app, {
    store: deps.ruleStore,
    rules: deps.rules,
    token: settings.adminToken,
    logger,
    warnings,
    rollout: deps.rollout,
  });
  if (deps.rollout !== undefined) registerRolloutSummary(app, deps.rollout);
  if (deps.dashboard === true) registerDashboard(app, logger);

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    const r = await deps.readiness();
    return reply.code(r.ready ? 200 : 503).send({ status: r.status ?? (r.ready ? 'ready' : 'not ready'), ...r.checks });
  });
  app.get('/metrics', async (_request, reply) => {
    if (deps.fleet !== undefined) {
      const merged = await deps.fleet.metrics();
      return reply.header('content-type', merged.contentType).send(merged.text);
    }
    const text = await metrics.registry.metrics();
    return reply.header('content-type', metrics.registry.contentType).send(text);
  });
  app.get('/v1/stats', async (request) => {
    const admin = settings.adminToken !== undefined && authorized(request.headers.authorization, settings.adminToken);
    return deps.fleet === undefined ? statsOf(deps, admin) : deps.fleet.stats(admin);
  });
  // Public and read-only, as /v1/stats: the fleet-wide breakers' states (the dashboard and
  // `sluice status` show them).
  app.get('/v1/breakers', async () => ({ at: Date.now(), breakers: await deps.service.breakers() }));
  return app;
}

/** A hot-key report as `/v1/stats` gives it: without the keys unless `admin` asks. */
type StatsHotKeys = HotKeyReport & { readonly keysHidden?: true };

/** The hot-key reports with their keys (`admin`), or with the counts only. */
function hotKeysFor(reports: readonly HotKeyReport[], admin: boolean): readonly StatsHotKeys[] {
  return admin ? reports : reports.map((r) => ({ ...r, keys: [], keysHidden: true }));
}

/** JSON is UTF-8 (RFC 8259); a body declared in another charset would be read wrongly. */
const UTF8 = /^utf-?8$/i;

/** The `charset` parameter of a Content-Type header, unquoted; undefined when absent. */
function charsetOf(contentType: string | undefined): string | undefined {
  const m = /;\s*charset\s*=\s*("?)([^";\s]*)\1/i.exec(contentType ?? '');
  return m?.[2];
}
