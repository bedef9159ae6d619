/* eslint-disable @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-return --
   the assertions read parsed JSON answers dynamically */
import { request as httpRequest } from 'node:http';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, rulesFile, spawnServe, spawnSluice, type Serve } from '../../../test/sluice-serve.js';
import { launchChromium, openDashboard, type DashboardRun, type PageGlobals } from './browser.js';
import { call, runCli } from './support.js';

// User-controlled text that would run script if it were ever parsed as HTML.
const XSS_AUTHOR = '<img src=x onerror="window.__xss=1">';
const XSS_REASON = '<script>window.__xss=2</script> & <b>bold</b>';
const XSS_COMMENT = '# <img src=x onerror="window.__xss=3">';

const V1 = `resources:
  api: { limits: { algorithm: gcra, limit: 5, windowMs: 1000 } }
  shadowed: { shadow: true, limits: { algorithm: gcra, limit: 2, windowMs: 1000 } }
  odd/name@x: { limits: { algorithm: concurrency, limit: 1 } }
`;
const V2 = `${XSS_COMMENT}
resources:
  api: { limits: { algorithm: gcra, limit: 10, windowMs: 1000 } }
  shadowed: { shadow: true, limits: { algorithm: gcra, limit: 2, windowMs: 1000 } }
  odd/name@x: { limits: { algorithm: concurrency, limit: 1 } }
`;

// Bounds on a hang, not timed assertions: the page polls /v1/stats every second.
const WAIT = { timeout: 30_000 };

/** GET with the path sent exactly as given (fetch would resolve `..` first). */
function rawGet(base: string, path: string): Promise<{ status: number; headers: Record<string, unknown> }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, path, method: 'GET' }, (res) => {
      res.resume();
      res.once('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers }));
    });
    req.once('error', reject);
    req.end();
  });
}

/** Reads one figure of a resource's card (cards are found by their data attribute, not by a selector built from the name). */
function figure(page: Page, resource: string, cls: string): Promise<number> {
  return page.evaluate(
    ([name, c]) => {
      const { document } = globalThis as unknown as PageGlobals;
      const card = [...document.querySelectorAll('article.resource')].find((a) => a.dataset.resource === name);
      return Number(card?.querySelector(`.${c}`)?.textContent ?? 'NaN');
    },
    [resource, cls] as const,
  );
}

describe('the web dashboard in headless Chromium', () => {
  const rules = rulesFile(V1);
  let run: DashboardRun | undefined;
  let server: Serve;
  let page: Page;
  let consoleErrors: string[] = [];

  beforeAll(async () => {
    run = await openDashboard(rules.path);
    ({ server, page, consoleErrors } = run);
  });
  afterAll(async () => {
    await run?.close();
    rules.remove();
  });

  it('loads with a strict CSP and no console errors', async () => {
    const res = await page.goto(`${server.url}/dashboard`);
    expect(res?.status()).toBe(200);
    const headers = res!.headers();
    expect(headers['content-security-policy']).toContain("script-src 'self'");
    expect(headers['content-security-policy']).toContain("default-src 'none'");
    expect(headers['x-content-type-options']).toBe('nosniff');
    expect(headers['cache-control']).toBe('no-cache');
    await page.waitForSelector('#connection[data-state="live"]', WAIT);
    // Without a token the rules panel says so; the charts work regardless.
    await page.waitForFunction(
      () => (globalThis as unknown as PageGlobals).document.querySelector('#rules-message')?.textContent?.includes('admin token'),
      undefined,
      WAIT,
    );
    expect(await page.locator('#rules-body').isHidden()).toBe(true);
    expect(consoleErrors).toEqual([]);
  });

  it('charts allowed, denied and shadow-denied rates per resource from live traffic', async () => {
    let sending = true;
    const traffic = (async () => {
      // Faster than the limits allow, so both allowed and denied decisions keep coming.
      while (sending) {
        await Promise.all([
          call(server.url, '/v1/check', { resource: 'api', key: 'k' }),
          call(server.url, '/v1/check', { resource: 'shadowed', key: 'k' }),
          call(server.url, '/v1/acquire', { resource: 'odd/name@x', key: 'k', maxWaitMs: 0 }),
        ]);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    try {
      await page.waitForFunction(
        () => {
          const cards = [...(globalThis as unknown as PageGlobals).document.querySelectorAll('article.resource')];
          const value = (name: string, cls: string) =>
            Number(cards.find((a) => a.dataset.resource === name)?.querySelector(`.${cls}`)?.textContent ?? 0);
          return value('api', 'allowed-rate') > 0 && value('api', 'denied-rate') > 0 && value('shadowed', 'shadow-rate') > 0;
        },
        undefined,
        WAIT,
      );
    } finally {
      sending = false;
      await traffic;
    }
    expect(await figure(page, 'api', 'peak-allowed')).toBeGreaterThan(0);
    expect(await figure(page, 'api', 'peak-denied')).toBeGreaterThan(0);
    expect(await figure(page, 'api', 'limit-rate')).toBe(5);
    // Shadow mode never denies: its would-be denials are allowed and shown apart.
    expect(await figure(page, 'shadowed', 'peak-denied')).toBe(0);
    expect(await figure(page, 'shadowed', 'peak-shadow')).toBeGreaterThan(0);
    expect(await figure(page, 'api', 'peak-shadow')).toBe(0);
    // A name with the characters resource names may have is shown exactly.
    const names = await page.$$eval('article.resource h3', (hs) => hs.map((h) => h.textContent));
    expect(names).toEqual(expect.arrayContaining(['api', 'shadowed', 'odd/name@x']));
    expect(await page.locator('article.resource svg polyline.allowed').count()).toBeGreaterThanOrEqual(3);
  });

  it('shows the 401 of a wrong token as a readable message', async () => {
    await page.fill('#token', 'wrong-token-0123456789');
    await page.click('#token-form button[type="submit"]');
    await page.waitForSelector('#rules-message[data-code="SLUICE_ERR_UNAUTHORIZED"]', WAIT);
    expect(await page.textContent('#rules-message')).toMatch(/^401 SLUICE_ERR_UNAUTHORIZED: /);
    expect(await page.locator('#rules-body').isHidden()).toBe(true);
  });

  it('shows the rule history once the token is entered, keeping the token out of the URL', async () => {
    await page.fill('#token', TOKEN);
    await page.click('#token-form button[type="submit"]');
    await page.waitForSelector('#active-version[data-version="1"]', WAIT);
    expect(await page.locator('#history tbody tr').count()).toBe(1);
    expect(await page.textContent('#history tbody tr')).toContain('sluice serve');
    expect(page.url()).not.toContain(TOKEN);
    expect(await page.evaluate(() => (globalThis as unknown as PageGlobals).sessionStorage.getItem('sluice.adminToken'))).toBe(
      TOKEN,
    );
  });

  it('shows a version applied through the admin API, with its author and reason as text', async () => {
    const applied = await call(
      server.url,
      '/v1/admin/rules',
      { text: V2, author: XSS_AUTHOR, reason: XSS_REASON },
      { token: TOKEN },
    );
    expect(applied.status).toBe(201);
    await page.waitForSelector('#active-version[data-version="2"]', WAIT);
    const row = page.locator('#history tbody tr[data-version="2"]');
    expect(await row.locator('td').nth(2).textContent()).toBe(XSS_AUTHOR);
    expect(await row.locator('td').nth(3).textContent()).toBe(XSS_REASON);
    expect(await page.locator('#rules-panel img, #rules-panel script, #rules-panel b').count()).toBe(0);
  });

  it('shows the changed lines of the diff between two versions', async () => {
    await page.selectOption('#diff-from', '1');
    await page.selectOption('#diff-to', '2');
    await page.click('#diff-form button[type="submit"]');
    await page.waitForSelector('#diff .diff-added', WAIT);
    const added = await page.$$eval('#diff .diff-added', (xs) => xs.map((x) => x.textContent?.trimEnd()));
    const removed = await page.$$eval('#diff .diff-removed', (xs) => xs.map((x) => x.textContent?.trimEnd()));
    expect(added).toEqual([`+${XSS_COMMENT}`, '+  api: { limits: { algorithm: gcra, limit: 10, windowMs: 1000 } }']);
    expect(removed).toEqual(['-  api: { limits: { algorithm: gcra, limit: 5, windowMs: 1000 } }']);
    expect(await page.locator('#diff img').count()).toBe(0);
  });

  it('rolls back to a chosen version from the page', async () => {
    await page.selectOption('#rollback-version', '1');
    await page.fill('#rollback-author', 'dashboard-test');
    await page.fill('#rollback-reason', 'limit 10 was too generous');
    await page.click('#rollback-form button[type="submit"]');
    await page.waitForSelector('#active-version[data-version="3"]', WAIT);
    const current = await call(server.url, '/v1/admin/rules', undefined, { token: TOKEN });
    expect(current.json).toMatchObject({
      version: 3,
      rolledBackFrom: 1,
      author: 'dashboard-test',
      reason: 'limit 10 was too generous',
    });
    expect(current.json.source).toBe(V1);
    await page.waitForSelector('#rules-message.ok', WAIT);
    expect(await page.textContent('#rules-message')).toContain('Rolled back: v3');
    expect(await page.locator('#history tbody tr').count()).toBe(3);
  });

  it('shows a rollout with the version of each cohort and its share, and pauses and aborts it', async () => {
    const started = await call(
      server.url,
      '/v1/admin/rollout',
      {
        // The candidate also adds an Envoy domain, split as the resource is.
        text: `${V2}domains:\n  - domain: edge\n    descriptors: [{ key: ip, rate_limit: { unit: second, requests_per_unit: 5 } }]\n`,
        author: XSS_AUTHOR,
        reason: XSS_REASON,
        steps: [{ percent: 25, holdMs: 3_600_000 }],
      },
      { token: TOKEN },
    );
    expect(started.status).toBe(201);
    await page.waitForSelector('#rollout-summary[data-status="running"]', WAIT);
    expect(await page.textContent('#rollout-summary')).toBe('running: baseline v3 · candidate on 25% of keys');
    const details = await page.$$eval('#rollout-details dd', (xs) => xs.map((x) => x.textContent));
    expect(details.slice(0, 4)).toEqual(['api', 'edge', '1 of 1', `${XSS_AUTHOR}: ${XSS_REASON}`]);
    const terms = await page.$$eval('#rollout-details dt', (xs) => xs.map((x) => x.textContent));
    expect(terms.slice(0, 2)).toEqual(['Resources', 'Envoy domains']);
    await page.fill('#rollout-author', 'dashboard-test');
    await page.fill('#rollout-reason', 'hold it');
    await page.click('#rollout-form button[data-action="pause"]');
    await page.waitForSelector('#rollout-summary[data-status="paused"]', WAIT);
    await page.click('#rollout-form button[data-action="abort"]');
    await page.waitForSelector('#rollout-summary[data-status="aborted"]', WAIT);
    expect(await page.textContent('#rollout-summary')).toBe('aborted: v3 → not applied');
    const state = await call(server.url, '/v1/admin/rollout', undefined, { token: TOKEN });
    expect(state.json.rollout).toMatchObject({ status: 'aborted', note: 'aborted by dashboard-test: hold it' });
    expect(await page.locator('#rollout-panel img, #rollout-panel script, #rollout-panel b').count()).toBe(0);
  });

  it('never ran script from user-controlled text', async () => {
    // Resource names cannot carry markup at all: the service refuses such a name.
    const odd = await call(server.url, '/v1/check', { resource: XSS_AUTHOR, key: 'k' });
    expect(odd.status).toBeGreaterThanOrEqual(400);
    expect(odd.status).toBeLessThan(500);
    expect(odd.json.error.code).toMatch(/^SLUICE_ERR_/);
    expect(await page.evaluate(() => (globalThis as unknown as PageGlobals).__xss)).toBeUndefined();
  });
});

describe('the dashboard over HTTP', () => {
  const rules = rulesFile(V1);
  let server: Serve;
  let off: Serve;

  beforeAll(async () => {
    [server, off] = await Promise.all([
      spawnServe({ rules: rules.path }),
      spawnSluice([
        '--rules',
        rules.path,
        '--port',
        '0',
        '--grpc-port',
        '0',
        '--rules-dir',
        `${rules.path}.off`,
        '--no-dashboard',
      ]),
    ]);
  });
  afterAll(async () => {
    await Promise.all([server?.stop(), off?.stop()]);
    rules.remove();
  });

  it('serves only its own files: traversal and unknown names get 404', async () => {
    for (const path of ['/dashboard', '/dashboard/', '/dashboard/app.js', '/dashboard/lib/rates.js', '/dashboard/style.css']) {
      const res = await rawGet(server.url, path);
      expect(res.status, path).toBe(200);
      expect(res.headers['x-content-type-options'], path).toBe('nosniff');
    }
    for (const path of [
      '/dashboard/../package.json',
      '/dashboard/%2e%2e/package.json',
      '/dashboard/..%2fpackage.json',
      '/dashboard/%2e%2e%2fpackage.json',
      '/dashboard/%2E%2E%2Fpackage.json',
      '/dashboard/..%5cpackage.json',
      '/dashboard/lib/../app.js',
      '/dashboard/lib/../../package.json',
      '/dashboard/%2fetc%2fpasswd',
      '/dashboard/dashboard.ts',
      '/dashboard/constructor',
      '/dashboard/__proto__',
    ]) {
      expect((await rawGet(server.url, path)).status, path).toBe(404);
    }
  });

  it('answers 304 to a revalidation with the same ETag', async () => {
    const first = await fetch(`${server.url}/dashboard/app.js`);
    expect(first.headers.get('content-type')).toMatch(/^text\/javascript/);
    const etag = first.headers.get('etag')!;
    expect(etag).toMatch(/^".+"$/);
    const again = await fetch(`${server.url}/dashboard/app.js`, { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
  });

  it('is not served with --no-dashboard', async () => {
    const res = await call(off.url, '/dashboard');
    expect(res.status).toBe(404);
    expect(res.json.error.code).toBe('SLUICE_ERR_NOT_FOUND');
    expect((await call(off.url, '/v1/stats')).status).toBe(200);
  });
});

describe('fleet-wide circuit breakers on the dashboard and in sluice status', () => {
  const rules = rulesFile(`resources:
  db:
    limits: { algorithm: gcra, limit: 1000, windowMs: 1000 }
    breaker: { scope: fleet, minimumCalls: 5, failureRateThreshold: 0.5, openDurationMs: 600000, syncMs: 50 }
  api: { limits: { algorithm: gcra, limit: 5, windowMs: 1000 } }
`);
  let server: Serve;
  let browser: Browser;
  let page: Page;
  const consoleErrors: string[] = [];

  beforeAll(async () => {
    [server, browser] = await Promise.all([spawnServe({ rules: rules.path }), launchChromium()]);
    page = await browser.newPage();
    page.on('pageerror', (err) => consoleErrors.push(String(err)));
    page.on('console', (msg) => {
      if (msg.type() === 'error') consoleErrors.push(msg.text());
    });
  });
  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    rules.remove();
  });

  const stateOf = (resource: string) =>
    page.evaluate((name) => {
      const { document } = globalThis as unknown as PageGlobals;
      const row = [...document.querySelectorAll('#breakers tbody tr')].find((r) => r.dataset.resource === name);
      return row === undefined ? undefined : { state: row.dataset.state, calls: row.querySelector('.calls')?.textContent };
    }, resource);

  it('shows a breaker closed, then open once reported failures trip it, with its window outcomes', async () => {
    await page.goto(`${server.url}/dashboard`);
    await page.waitForFunction(
      () => (globalThis as unknown as PageGlobals).document.querySelector('#breakers tbody tr[data-resource="db"]') !== null,
      undefined,
      WAIT,
    );
    expect(await stateOf('db')).toEqual({ state: 'closed', calls: '0' });
    expect(await stateOf('api')).toBeUndefined(); // no breaker, no row
    const failures = Array.from({ length: 6 }, () => ({ resource: 'db', ok: false, durationMs: 5 }));
    // Reports need a credential; the admin token is one.
    const posted = await call(server.url, '/v1/outcomes', { items: failures }, { token: TOKEN });
    expect(posted.status).toBe(200);
    await page.waitForFunction(
      () =>
        (globalThis as unknown as PageGlobals).document.querySelector('#breakers tbody tr[data-resource="db"]')?.dataset.state ===
        'open',
      undefined,
      WAIT,
    );
    expect(await stateOf('db')).toEqual({ state: 'open', calls: '6' });
    expect((await call(server.url, '/v1/check', { resource: 'db' })).json).toMatchObject({
      allowed: false,
      reason: 'circuit_open',
    });
    expect(consoleErrors).toEqual([]);
  });

  it('lists the breaker in sluice status', async () => {
    const r = await runCli(['status', '--once', '--interval', '200', '--server', server.url]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toContainEqual(expect.stringMatching(/^BREAKER\s+STATE\s+CALLS\s+FAILED\s+SLOW\s+WINDOW\s+PROBES$/));
    expect(lines).toContainEqual(expect.stringMatching(/^db\s+OPEN\s+6\s+6\s+0\s+10s\s+3$/));
  });
});
