import Fastify, { type FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DASHBOARD_CSP, DASHBOARD_FILES, registerDashboard } from './dashboard.js';

const logger = pino({ level: 'silent' });

describe('dashboard routes', () => {
  let app: FastifyInstance;
  let broken: FastifyInstance;

  beforeAll(async () => {
    app = Fastify();
    registerDashboard(app, logger);
    broken = Fastify();
    registerDashboard(broken, logger, new URL('file:///nonexistent-sluice-root/'));
    await Promise.all([app.ready(), broken.ready()]);
  });
  afterAll(async () => {
    await Promise.all([app.close(), broken.close()]);
  });

  it('serves the page and its own files with CSP, nosniff and revalidation headers', async () => {
    for (const name of Object.keys(DASHBOARD_FILES).filter((n) => !n.startsWith('lib/'))) {
      const res = await app.inject({ url: `/dashboard/${name}` });
      expect(res.statusCode, name).toBe(200);
      expect(res.headers['content-type'], name).toBe(DASHBOARD_FILES[name]!.type);
      expect(res.headers['content-security-policy']).toBe(DASHBOARD_CSP);
      expect(res.headers['x-content-type-options']).toBe('nosniff');
      expect(res.headers['cache-control']).toBe('no-cache');
    }
    const page = await app.inject({ url: '/dashboard' });
    expect(page.body).toContain('<script type="module" src="/dashboard/app.js"></script>');
    const again = await app.inject({ url: '/dashboard', headers: { 'if-none-match': String(page.headers.etag) } });
    expect(again.statusCode).toBe(304);
    expect(again.body).toBe('');
  });

  it('keeps inline script out of the policy and the page', async () => {
    expect(DASHBOARD_CSP).not.toMatch(/unsafe-inline|unsafe-eval/);
    const page = (await app.inject({ url: '/dashboard' })).body;
    expect(page).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(page).not.toMatch(/\son[a-z]+=|style=/i);
  });

  it('answers 404 for any name that is not one of its files', async () => {
    for (const url of [
      '/dashboard/../package.json',
      '/dashboard/%2e%2e/package.json',
      '/dashboard/..%2fpackage.json',
      '/dashboard/index.HTML',
      '/dashboard/toString',
      '/dashboard/hasOwnProperty',
    ]) {
      const res = await app.inject({ url });
      expect(res.statusCode, url).toBe(404);
      // (The injector resolves `..` itself; the integration test sends those paths verbatim.)
      expect(res.body, url).not.toContain('@sluice/server');
    }
  });

  it('answers unknown names with the error format', async () => {
    const res = await app.inject({ url: '/dashboard/secret.txt' });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toMatchObject({ error: { code: 'SLUICE_ERR_NOT_FOUND' } });
  });

  it('answers 404, not a crash, when a file is missing on disk', async () => {
    const res = await broken.inject({ url: '/dashboard/app.js' });
    expect(res.statusCode).toBe(404);
    expect(res.json().error.message).toContain('unavailable');
  });
});
