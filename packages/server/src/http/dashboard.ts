import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { ServerError, ServerErrorCodes } from '../errors.js';
import { sendError } from './reply.js';

/** Where the dashboard's files live: the package root (this file is at `src/http` or `dist/http`). */
const PACKAGE_ROOT = new URL('../../', import.meta.url);

/**
 * Every file the dashboard serves, by its name under `/dashboard/`. Nothing else is served: a
 * request path is only ever looked up here, never joined to a directory, so no path can reach
 * another file. The `lib/` modules are compiled from `src` (they are shared with the server and
 * unit-tested there); the rest is plain browser code in `dashboard/`.
 */
export const DASHBOARD_FILES: Readonly<Record<string, { readonly path: string; readonly type: string }>> = Object.freeze({
  'index.html': { path: 'dashboard/index.html', type: 'text/html; charset=utf-8' },
  'app.js': { path: 'dashboard/app.js', type: 'text/javascript; charset=utf-8' },
  'charts.js': { path: 'dashboard/charts.js', type: 'text/javascript; charset=utf-8' },
  'rules.js': { path: 'dashboard/rules.js', type: 'text/javascript; charset=utf-8' },
  'rollout.js': { path: 'dashboard/rollout.js', type: 'text/javascript; charset=utf-8' },
  'dom.js': { path: 'dashboard/dom.js', type: 'text/javascript; charset=utf-8' },
  'adaptive.js': { path: 'dashboard/adaptive.js', type: 'text/javascript; charset=utf-8' },
  'clock.js': { path: 'dashboard/clock.js', type: 'text/javascript; charset=utf-8' },
  'hot-keys.js': { path: 'dashboard/hot-keys.js', type: 'text/javascript; charset=utf-8' },
  'tiers.js': { path: 'dashboard/tiers.js', type: 'text/javascript; charset=utf-8' },
  'style.css': { path: 'dashboard/style.css', type: 'text/css; charset=utf-8' },
  'favicon.svg': { path: 'dashboard/favicon.svg', type: 'image/svg+xml' },
  'breakers.js': { path: 'dashboard/breakers.js', type: 'text/javascript; charset=utf-8' },
  'health.js': { path: 'dashboard/health.js', type: 'text/javascript; charset=utf-8' },
  'lib/rates.js': { path: 'dist/stats/rates.js', type: 'text/javascript; charset=utf-8' },
  'lib/diff-lines.js': { path: 'dist/dashboard/diff-lines.js', type: 'text/javascript; charset=utf-8' },
  'lib/clock.js': { path: 'dist/stats/clock.js', type: 'text/javascript; charset=utf-8' },
  'lib/health.js': { path: 'dist/stats/health.js', type: 'text/javascript; charset=utf-8' },
});

/**
 * The dashboard's Content-Security-Policy: its own scripts, styles and images only, no inline
 * script or style, fetches to this server only, never framed.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

interface Loaded {
  readonly body: Buffer;
  readonly etag: string;
}

/**
 * Serves the web dashboard: `GET /dashboard` (the page) and `GET /dashboard/<file>` for the
 * files of {@link DASHBOARD_FILES}. The page reads `/v1/stats` and `/v1/resources`, and the
 * admin API with a token the user enters. Files are read once, on first request.
 */
export function registerDashboard(app: FastifyInstance, logger: Logger, root: URL = PACKAGE_ROOT): void {
  const cache = new Map<string, Promise<Loaded>>();
  const load = (name: string, path: string) => {
    let loaded = cache.get(name);
    if (loaded === undefined) {
      loaded = readFile(new URL(path, root)).then((body) => ({
        body,
        etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`,
      }));
      // A failed read is retried on the next request (e.g. `dist` was being rebuilt).
      loaded.catch(() => cache.delete(name));
      cache.set(name, loaded);
    }
    return loaded;
  };

  const serve = async (name: string, request: FastifyRequest, reply: FastifyReply) => {
    const file = Object.hasOwn(DASHBOARD_FILES, name) ? DASHBOARD_FILES[name] : undefined;
    if (file === undefined) {
      return sendError(reply, new ServerError(ServerErrorCodes.NOT_FOUND, `no dashboard file ${JSON.stringify(name)}`), logger);
    }
    let loaded: Loaded;
    try {
      loaded = await load(name, file.path);
    } catch (err) {
      logger.error({ err, file: file.path }, 'dashboard file unreadable');
      return sendError(reply, new ServerError(ServerErrorCodes.NOT_FOUND, `dashboard file ${name} is unavailable`), logger);
    }
    void reply
      .header('content-security-policy', DASHBOARD_CSP)
      .header('x-content-type-options', 'nosniff')
      .header('x-frame-options', 'DENY')
      .header('referrer-policy', 'no-referrer')
      // Revalidated on every load: the files change with the server's version, and the ETag
      // makes an unchanged file cost a 304.
      .header('cache-control', 'no-cache')
      .header('etag', loaded.etag);
    if (request.headers['if-none-match'] === loaded.etag) return reply.code(304).send();
    return reply.type(file.type).send(loaded.body);
  };

  app.get('/dashboard', (request, reply) => serve('index.html', request, reply));
  app.get('/dashboard/*', (request, reply) => {
    const name = (request.params as { '*'?: string })['*'] ?? '';
    return serve(name === '' ? 'index.html' : name, request, reply);
  });
}
