/**
 * The dashboard's layout in headless Chromium on a real `sluice serve` (embedded store): the
 * charts say their window once, as plotted; table headers wrap only between words (or their
 * table scrolls) at a wide and a narrow viewport, every table filled; the rollout's actions show
 * only while a rollout is in progress, and only those its state allows.
 */
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, rulesFile, type Serve } from '../../../test/sluice-serve.js';
import { openDashboard, type DashboardRun, type PageGlobals } from './browser.js';
import { admin, call } from './support.js';

// A table of every kind: adaptive limits, priority tiers, a fleet breaker, hot keys, history.
const RULES = `resources:
  api:pay:
    limits: { algorithm: sliding-window, limit: 10, windowMs: 1000 }
  payments:
    limits: { algorithm: token-bucket, limit: 10, windowMs: 86400000 }
    priority:
      tiers: [{ name: vip, share: 0.2 }, { name: standard }]
    boost: { limit: 3, windowMs: 86400000, algorithm: token-bucket, tiers: [vip] }
  db:
    limits: { algorithm: gcra, limit: 1000, windowMs: 1000 }
    breaker: { scope: fleet, minimumCalls: 5, failureRateThreshold: 0.5, openDurationMs: 600000, syncMs: 50 }
  api:hot:
    limits: { algorithm: fixed-window, limit: 1000000, windowMs: 60000 }
    hotKeys: { windowMs: 60000, threshold: { rate: 0.3, share: 0.5 }, action: lease }
adaptive:
  api:pay: { min: 5, max: 100, policy: demand, intervalMs: 250, cooldownMs: 1000, demand: { rejectForMs: 750, idleForMs: 600000 } }
`;

// Bounds on a hang, not timed assertions: the page polls /v1/stats every second.
const WAIT = { timeout: 30_000 };

/** The browser globals the layout checks use (the tests compile without the DOM library). */
interface Box {
  readonly left: number;
  readonly right: number;
  readonly width: number;
}
interface LayoutNode {
  readonly textContent: string | null;
  readonly nodeType: number;
  readonly childNodes: Iterable<LayoutNode>;
  readonly parentElement: LayoutNode | null;
  readonly offsetParent: LayoutNode | null;
  closest(selector: string): LayoutNode | null;
  getBoundingClientRect(): Box;
}
interface LayoutGlobals {
  readonly document: {
    querySelectorAll(selector: string): Iterable<LayoutNode>;
    createRange(): {
      setStart(node: LayoutNode, offset: number): void;
      setEnd(node: LayoutNode, offset: number): void;
      getClientRects(): Iterable<Box>;
    };
  };
  getComputedStyle(node: LayoutNode): { overflowX: string };
}

/**
 * Every visible table header's words that are broken across lines (a word whose text has more
 * than one box), and every visible table that pokes out of its section without a scrolling box
 * around it; with the headers seen, so a check on no header cannot pass.
 */
function layoutDefects(page: Page): Promise<{ headers: number; broken: string[]; overflowing: string[] }> {
  return page.evaluate(() => {
    const g = globalThis as unknown as LayoutGlobals;
    const broken: string[] = [];
    let headers = 0;
    for (const th of g.document.querySelectorAll('th')) {
      if (th.offsetParent === null) continue;
      headers++;
      for (const text of th.childNodes) {
        if (text.nodeType !== 3) continue;
        const value = text.textContent ?? '';
        for (const m of value.matchAll(/\S+/g)) {
          const range = g.document.createRange();
          range.setStart(text, m.index);
          range.setEnd(text, m.index + m[0].length);
          const boxes = [...range.getClientRects()].filter((b) => b.width > 0);
          if (boxes.length > 1) broken.push(`${m[0]} (in "${value}")`);
        }
      }
    }
    const overflowing: string[] = [];
    for (const table of g.document.querySelectorAll('table')) {
      if (table.offsetParent === null) continue;
      const section = table.closest('section')!.getBoundingClientRect();
      let clip: LayoutNode = table;
      for (let n = table.parentElement; n !== null && n.closest('section') !== null; n = n.parentElement) {
        if (['auto', 'scroll'].includes(g.getComputedStyle(n).overflowX)) {
          clip = n;
          break;
        }
      }
      const box = clip.getBoundingClientRect();
      if (box.right > section.right + 0.5 || box.left < section.left - 0.5) {
        overflowing.push(
          `${(table as unknown as { id: string }).id || 'table'} ${Math.round(box.right)} > ${Math.round(section.right)}`,
        );
      }
    }
    return { headers, broken, overflowing };
  });
}

/** The actions the rollout panel shows (its buttons that are visible). */
async function rolloutActions(page: Page): Promise<string[]> {
  const shown: string[] = [];
  for (const action of ['pause', 'resume', 'promote', 'abort']) {
    if (await page.locator(`#rollout-form button[data-action="${action}"]`).isVisible()) shown.push(action);
  }
  return shown;
}

describe('the dashboard layout (embedded store, headless Chromium)', () => {
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

  it('says the charts window once, as the charts plot it', async () => {
    for (let i = 0; i < 5; i++) await call(server.url, '/v1/check', { resource: 'api:pay', key: 'k' });
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.goto(`${server.url}/dashboard`);
    // A chart with two points or more (a flat line has no height: attached, not visible).
    await page.waitForSelector('article.resource[data-resource="api:pay"] polyline.allowed[points*=" "]', {
      ...WAIT,
      state: 'attached',
    });
    const said = await page.evaluate(() => {
      const { document } = globalThis as unknown as PageGlobals;
      const text = document.querySelector('#charts-panel')?.textContent ?? '';
      return [...text.matchAll(/last\s+[\d.]+\s*(?:s|sec|seconds?|min|minutes?)\b/gi)].map((m) => m[0]);
    });
    expect(said).toEqual(['last 5 minutes']);
    // Every chart's x axis spans that window, whatever its resource's history.
    const spans = await page.evaluate(() =>
      [...(globalThis as unknown as PageGlobals).document.querySelectorAll('article.resource svg.chart')].map(
        (c) => Number(c.dataset.to) - Number(c.dataset.from),
      ),
    );
    expect(spans.length).toBeGreaterThan(0);
    expect(new Set(spans)).toEqual(new Set([5 * 60_000]));
    expect(consoleErrors).toEqual([]);
  });

  it('wraps table headers only between words, or scrolls the table, at 1280 and 800 px', async () => {
    // Fill every table: an adaptive limit, tiers, a breaker, hot keys, two versions with long words.
    for (let i = 0; i < 12; i++)
      await call(server.url, '/v1/check', { resource: 'payments', priority: i % 2 ? 'vip' : 'standard' });
    for (let i = 0; i < 20; i++) await call(server.url, '/v1/check', { resource: 'api:hot', key: 'channel-7' });
    const failures = Array.from({ length: 6 }, () => ({ resource: 'db', ok: false, durationMs: 5 }));
    expect((await call(server.url, '/v1/outcomes', { items: failures }, { token: TOKEN })).status).toBe(200);
    const applied = await admin(server, '/rules', {
      text: `${RULES}# again\n`,
      author: 'operations-engineering-on-call',
      reason: 'raise-the-payments-limits-for-the-seasonal-campaign-after-capacity-review',
    });
    expect(applied.status).toBe(201);
    await page.fill('#token', TOKEN);
    await page.click('#token-form button[type="submit"]');
    await page.waitForSelector('#history tbody tr[data-version="2"]', WAIT);
    await page.waitForSelector('#adaptive-panel:not([hidden])', WAIT);
    await page.waitForSelector('#tiers tbody tr[data-tier="vip"]', WAIT);
    await page.waitForSelector('#breakers tbody tr[data-resource="db"]', WAIT);
    await page.waitForSelector('table.hot-keys tr[data-key="channel-7"]', WAIT);
    for (const width of [1280, 800]) {
      await page.setViewportSize({ width, height: 900 });
      const found = await layoutDefects(page);
      // History, adaptive, tiers, breakers and hot keys: at least 5 tables of headers.
      expect(found.headers, `${width} px`).toBeGreaterThanOrEqual(25);
      expect(found.broken, `${width} px`).toEqual([]);
      expect(found.overflowing, `${width} px`).toEqual([]);
    }
    expect(consoleErrors).toEqual([]);
  });

  it('shows the rollout actions only while a rollout is in progress, those its state allows', async () => {
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.goto(`${server.url}/dashboard`);
    await page.waitForSelector('#rollout-summary[data-status="none"]', WAIT);
    expect(await page.locator('#rollout-form').isVisible()).toBe(false);
    expect(await rolloutActions(page)).toEqual([]);

    const started = await admin(server, '/rollout', {
      // The candidate raises db's limit: db's keys are split.
      text: RULES.replace('limit: 1000,', 'limit: 2000,'),
      author: 'dashboard-test',
      reason: 'layout',
      steps: [{ percent: 25, holdMs: 3_600_000 }],
    });
    expect(started.status, JSON.stringify(started.json)).toBe(201);
    await page.waitForSelector('#rollout-summary[data-status="running"]', WAIT);
    expect(await rolloutActions(page)).toEqual(['pause', 'promote', 'abort']);

    expect((await admin(server, '/rollout/pause', { author: 'dashboard-test', reason: 'hold' })).status).toBe(200);
    await page.waitForSelector('#rollout-summary[data-status="paused"]', WAIT);
    expect(await rolloutActions(page)).toEqual(['resume', 'promote', 'abort']);

    expect((await admin(server, '/rollout/abort', { author: 'dashboard-test', reason: 'done' })).status).toBe(200);
    await page.waitForSelector('#rollout-summary[data-status="aborted"]', WAIT);
    expect(await page.locator('#rollout-form').isVisible()).toBe(false);
    expect(await rolloutActions(page)).toEqual([]);
    expect(consoleErrors).toEqual([]);
  });
});
