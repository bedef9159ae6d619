import { isUtf8 } from 'node:buffer';
import type { RuleStore } from '@sluice/rules';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { ServerError, ServerErrorCodes } from '../errors.js';
import type { LiveRules } from '../live-rules.js';
import type { ServerMetrics } from '../metrics.js';
import type { RateLimitService } from '../service.js';
import type { Settings } from '../settings.js';
import { registerAdmin } from './admin.js';
import { registerApi } from './api.js';
import { registerDashboard } from './dashboard.js';
import { fromFastifyError, sendError } from './reply.js';

/** What the HTTP app is built from. */
export interface HttpDeps {
  readonly settings: Pick<Settings, 'maxBodyBytes' | 'maxBatch' | 'maxKeyLength' | 'maxWaitMs' | 'adminToken'> &
    Partial<Pick<Settings, 'apiToken'>>;
  readonly service: RateLimitService;
  readonly rules: LiveRules;
  readonly ruleStore: RuleStore;
  readonly metrics: ServerMetrics;
  readonly logger: Logger;
  /** Readiness: rules active and stores answering; the reasons when not. */
  readonly readiness: () => Promise<{ ready: boolean; checks: Record<string, string> }>;
  /** True once the server is shutting down. */
  readonly closing?: () => boolean;
  /**
   * Serve the web dashboard at `/dashboard`.
   * @default false
   */
  readonly dashboard?: boolean;
}

/**
 * The HTTP side of the server: the JSON API, the admin API, `/metrics`, `/v1/stats`,
 * `/healthz`, `/readyz` and (with `dashboard`) the web dashboard. Every error, fastify's own included, is answered by
 * {@link sendError}.
 */
export function buildHttpApp(deps: HttpDeps): FastifyInstance {
  const { settings, logger, metrics } = deps;
  // Typed as fastify's logger, so the instance has fastify's default type.
  const fastifyLogger: FastifyBaseLogger = logger;
  const app = Fastify({
    loggerInstance: fastifyLogger,
    // A rate limiter answers every request of its clients: per-request log lines would drown the rest.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: settings.maxBodyBytes,
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    // acquire waits; the wait is bounded by maxWaitMs, not by a socket timeout.
    requestTimeout: 0,
    frameworkErrors: (err, _request, reply) => {
      void sendError(reply, fromFastifyError(err), logger);
    },
    // Requests Node's HTTP parser refuses never reach a route; they still get the error format.
    clientErrorHandler: (err, socket) => {
      if (!socket.writable) {
        socket.destroy();
        return;
      }
      const code = (err as NodeJS.ErrnoException).code;
      const tooLarge = code === 'HPE_HEADER_OVERFLOW';
      const body = JSON.stringify({
        error: tooLarge
          ? { code: ServerErrorCodes.BODY_TOO_LARGE, message: 'the request head is too large' }
          : { code: ServerErrorCodes.INVALID_REQUEST, message: 'malformed HTTP request' },
      });
      const status = tooLarge ? '431 Request Header Fields Too Large' : '400 Bad Request';
      socket.end(
        `HTTP/1.1 ${status}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    },
  });

  // JSON only, parsed here so that every parse failure has the server's error code.
  app.removeContentTypeParser(['application/json', 'text/plain']);
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, raw, done) => {
    const bytes = typeof raw === 'string' ? Buffer.from(raw) : raw;
    // Decoding would turn invalid bytes into U+FFFD and merge keys that differ only in them.
    if (!isUtf8(bytes)) {
      done(new ServerError(ServerErrorCodes.MALFORMED_BODY, 'the body is not valid UTF-8'), undefined);
      return;
    }
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
  });

  app.setErrorHandler((err, _request, reply) => sendError(reply, fromFastifyError(err), logger));
  app.setNotFoundHandler((request, reply) =>
    sendError(
      reply,
      new ServerError(ServerErrorCodes.NOT_FOUND, `no endpoint ${request.method} ${request.url.split('?')[0]}`),
      logger,
    ),
  );
  // While shutting down, answers close their connection: keep-alive clients would otherwise
  // hold the server open after their last answer.
  app.addHook('onSend', async (_request, reply) => {
    if (deps.closing?.()) reply.header('connection', 'close');
  });
  app.addHook('onResponse', async (request, reply) => {
    metrics.httpRequest(request.routeOptions.url ?? 'unmatched', request.method, reply.statusCode);
  });

  registerApi(app, deps.service, settings, logger, settings.apiToken);
  registerAdmin(app, { store: deps.ruleStore, rules: deps.rules, token: settings.adminToken, logger });
  if (deps.dashboard === true) registerDashboard(app, logger);

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    const r = await deps.readiness();
    return reply.code(r.ready ? 200 : 503).send({ status: r.ready ? 'ready' : 'not ready', ...r.checks });
  });
  app.get('/metrics', async (_request, reply) => {
    const text = await metrics.registry.metrics();
    return reply.header('content-type', metrics.registry.contentType).send(text);
  });
  app.get('/v1/stats', async () => ({
    at: Date.now(),
    version: deps.rules.version?.version ?? 0,
    resources: metrics.stats((r) => deps.rules.has(r)),
  }));
  return app;
}
