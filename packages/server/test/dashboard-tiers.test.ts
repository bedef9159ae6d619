import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rulesFile, type Serve } from '../../../test/sluice-serve.js';
import { openDashboard, type DashboardRun, type PageGlobals } from './browser.js';
import { call } from './support.js';

// A day-long bucket: nothing comes back during the test, so the counts are exact.
const RULES = `
resources:
  payments:
    limits: { algorithm: token-bucket, limit: 10, windowMs: 86400000 }
    priority:
      tiers: [{ name: vip, share: 0.2 }, { name: standard }]
    boost: { limit: 3, windowMs: 86400000, algorithm: token-bucket, tiers: [vip] }
  plain: { limits: { algorithm: gcra, limit: 5, windowMs: 1000 } }
  audit:
    shadow: true
    limits: { algorithm: token-bucket, limit: 2, windowMs: 86400000 }
    priority:
      tiers: [{ name: vip, share: 0.5 }, { name: standard }]
`;

// Bounds on a hang, not timed assertions: the page polls /v1/stats every second.
const WAIT = { timeout: 30_000 };

/** The figures of one row of the tiers table (rows are found by data attributes). */
function tierRow(page: Page, resource: string, tier: string): Promise<Record<string, string> | undefined> {
  return page.evaluate(
    ([r, t]) => {
      const { document } = globalThis as unknown as PageGlobals;
      const row = [...document.querySelectorAll('#tiers tbody tr')].find((x) => x.dataset.resource === r && x.dataset.tier === t);
      if (row === undefined) return undefined;
      const text = (cls: string) => row.querySelector(`.${cls}`)?.textContent ?? '';
      return {
        allowed: text('allowed'),
        boosted: text('boosted'),
        denied: text('denied'),
        shadowDenied: text('shadow-denied'),
      };
    },
    [resource, tier] as const,
  );
}

describe('the dashboard shows priority tiers and boosts', () => {
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

  it('hides the table while no resource with tiers has decided', async () => {
    await call(server.url, '/v1/check', { resource: 'plain' });
    await page.goto(`${server.url}/dashboard`);
    await page.waitForFunction(
      () => (globalThis as unknown as PageGlobals).document.querySelector('#connection')?.textContent === 'live',
      undefined,
      WAIT,
    );
    expect(await page.locator('#tiers-panel').isHidden()).toBe(true);
  });

  it('lists each tier with its allowed, boosted, denied and shadow-denied decisions', async () => {
    for (let i = 0; i < 10; i++) await call(server.url, '/v1/check', { resource: 'payments' });
    for (let i = 0; i < 6; i++) await call(server.url, '/v1/check', { resource: 'payments', priority: 'vip' });
    // In shadow mode everything is admitted: the standard tier's share is 1 of the 2 (vip holds
    // half back), so the 4 calls over it are counted as shadow denials.
    for (let i = 0; i < 5; i++) await call(server.url, '/v1/check', { resource: 'audit', priority: 'standard' });
    // Until a snapshot taken after the last call is shown (an earlier one may hold part of them).
    await page.waitForFunction(
      () => {
        const rows = [...(globalThis as unknown as PageGlobals).document.querySelectorAll('#tiers tbody tr')];
        const vip = rows.find((r) => r.dataset.tier === 'vip');
        const audit = rows.find((r) => r.dataset.resource === 'audit');
        return vip?.querySelector('.denied')?.textContent === '1' && audit?.querySelector('.allowed')?.textContent === '5';
      },
      undefined,
      WAIT,
    );
    expect(await page.locator('#tiers-panel').isVisible()).toBe(true);
    expect(await tierRow(page, 'payments', 'standard')).toEqual({ allowed: '8', boosted: '0', denied: '2', shadowDenied: '0' });
    expect(await tierRow(page, 'payments', 'vip')).toEqual({ allowed: '5', boosted: '3', denied: '1', shadowDenied: '0' });
    expect(await tierRow(page, 'audit', 'standard')).toEqual({ allowed: '5', boosted: '0', denied: '0', shadowDenied: '4' });
    expect(await tierRow(page, 'plain', 'normal')).toBeUndefined();
    expect(consoleErrors).toEqual([]);
  });
});
