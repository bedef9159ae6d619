import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rulesFile, type Serve } from '../../../test/sluice-serve.js';
import { openDashboard, type DashboardRun, type PageGlobals } from './browser.js';
import { call } from './support.js';

// Shortened spans so a move happens within seconds of traffic (see docs/control-plane.md).
const RULES = `resources:
  api:pay:
    limits: { algorithm: sliding-window, limit: 10, windowMs: 1000 }
  api:plain:
    limits: { algorithm: gcra, limit: 5 }
adaptive:
  api:pay:
    min: 5
    max: 100
    policy: demand
    intervalMs: 250
    cooldownMs: 1000
    demand: { rejectForMs: 750, idleForMs: 600000 }
`;

// Bounds on a hang, not timed assertions: the page polls /v1/stats every second.
const WAIT = { timeout: 30_000 };

/** The text of the adaptive table's cells, row by row. */
function rows(page: Page): Promise<string[][]> {
  return page.evaluate(() => {
    const { document } = globalThis as unknown as PageGlobals;
    return [...document.querySelectorAll('#adaptive tbody tr')].map((tr) =>
      [
        ...(tr as unknown as { querySelectorAll(s: string): Iterable<{ textContent: string | null }> }).querySelectorAll('td'),
      ].map((td) => td.textContent ?? ''),
    );
  });
}

describe('adaptive limits on the dashboard (embedded store, headless Chromium)', () => {
  const rules = rulesFile(RULES);
  let run: DashboardRun | undefined;
  let server: Serve;
  let page: Page;

  beforeAll(async () => {
    run = await openDashboard(rules.path);
    ({ server, page } = run);
  });
  afterAll(async () => {
    await run?.close();
    rules.remove();
  });

  it('lists each adaptive limit with its bounds, and shows it move under load', async () => {
    await page.goto(`${server.url}/dashboard`);
    await page.waitForSelector('#adaptive-panel:not([hidden])', WAIT);
    // Limit and bounds are calls per the window beside them.
    expect(await rows(page)).toEqual([['api:pay', 'demand', '10', '5–100', '1 s', '—']]);

    let sending = true;
    const traffic = (async () => {
      // About 50 checks a second on a limit of 10 a second: far over 5% rejected.
      while (sending) {
        await Promise.all([0, 1].map(() => call(server.url, '/v1/check', { resource: 'api:pay', key: 'k' })));
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    try {
      await page.waitForFunction(
        () => {
          const cell = (globalThis as unknown as PageGlobals).document.querySelector('#adaptive tbody tr .adaptive-limit');
          return Number(cell?.textContent ?? 0) > 10;
        },
        undefined,
        WAIT,
      );
    } finally {
      sending = false;
      await traffic;
    }
    const [row] = await rows(page);
    expect(Number(row![2])).toBeGreaterThanOrEqual(12);
    expect(row![5]).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
    const stats = await call(server.url, '/v1/stats');
    expect(stats.json.adaptive[0]).toMatchObject({ resource: 'api:pay', deciding: true });
  });
});
