import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, rulesFile, type Serve } from '../../../test/sluice-serve.js';
import { openDashboard, type DashboardRun, type PageGlobals } from './browser.js';
import { call } from './support.js';

// A caller key that would run script if it were ever parsed as HTML.
const XSS_KEY = '<img src=x onerror="window.__xss=1">';

// Hot at 0.3 calls a second over a minute (18 calls) that are half of the resource's calls.
const RULES = `
resources:
  api:payments:
    limits: { algorithm: fixed-window, limit: 1000000, windowMs: 60000 }
    hotKeys: { windowMs: 60000, threshold: { rate: 0.3, share: 0.5 }, action: lease }
`;

// Bounds on a hang, not timed assertions: the page polls /v1/stats every second.
const WAIT = { timeout: 30_000 };

describe('hot keys on the web dashboard in headless Chromium', () => {
  const rules = rulesFile(RULES);
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

  it('lists the heaviest keys per resource to the admin and marks the mitigated one, keys as text only', async () => {
    await page.goto(`${server.url}/dashboard`);
    await page.waitForSelector('#connection[data-state="live"]', WAIT);
    await page.waitForSelector('table.hot-keys[data-resource="api:payments"]', WAIT);
    for (let i = 0; i < 4; i++) await call(server.url, '/v1/check', { resource: 'api:payments', key: XSS_KEY });
    for (let i = 0; i < 30; i++) await call(server.url, '/v1/check', { resource: 'api:payments', key: 'channel-7' });
    // Keys are the callers' data: without the admin token the panel counts them, names none.
    await page.waitForFunction(
      () =>
        /1 mitigated$/.test(
          (globalThis as unknown as PageGlobals).document.querySelector('table.hot-keys caption')?.textContent ?? '',
        ),
      undefined,
      WAIT,
    );
    expect(await page.locator('table.hot-keys tr[data-key]').count()).toBe(0);
    expect(await page.textContent('table.hot-keys td.hidden-keys')).toContain('admin token');
    await page.fill('#token', TOKEN);
    await page.click('#token-form button[type="submit"]');
    // A poll may land between the calls: wait for one after the last (30 calls a minute: 0.5/s).
    await page.waitForFunction(
      () =>
        (globalThis as unknown as PageGlobals).document.querySelector(
          'table.hot-keys tr[data-key="channel-7"][data-mitigation="lease"] .rate',
        )?.textContent === '0.5',
      undefined,
      WAIT,
    );
    const row = (n: number) => page.locator('table.hot-keys tbody tr').nth(n).locator('td').allTextContents();
    const rows = [await row(0), await row(1)];
    expect(rows[0]).toEqual(['channel-7', '0.5', expect.stringMatching(/^8\d\.\d%$/), 'lease']);
    expect(rows[1]).toEqual([XSS_KEY, '0.1', expect.stringMatching(/%$/), '—']);
    expect(await page.textContent('table.hot-keys caption')).toMatch(/^api:payments \d+ calls in 60 s, 1 mitigated$/);
    expect(await page.evaluate(() => (globalThis as unknown as PageGlobals).__xss)).toBeUndefined();
    expect(await page.locator('#hot-keys-empty').isHidden()).toBe(true);
    expect(consoleErrors).toEqual([]);
  });
});
