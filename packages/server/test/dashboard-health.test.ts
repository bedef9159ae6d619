/**
 * The dashboard's health strip in headless Chromium on a real `sluice serve`: on the embedded
 * store (reachable, the p99 of the last 60 s once decisions were made), and on a Redis of the
 * test's own that it stops, to see the strip turn degraded (in words and colour, with for how
 * long, why and the policy deciding) and come back; the figures that need the store (an adaptive
 * limit's last move) say they are unknown meanwhile. Needs `redis-server` on PATH, Chromium
 * (`SLUICE_CHROMIUM_PATH`) and the built CLI (`npm run build`).
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rulesFile, type Serve } from '../../../test/sluice-serve.js';
import { launchChromium, openDashboard, type DashboardRun, type PageGlobals } from './browser.js';
import { call, serveOnOwnRedis } from './support.js';

// An adaptive limit too: its last move is read from the store with every /v1/stats.
const RULES = `resources:
  api: { limits: { algorithm: gcra, limit: 5, windowMs: 1000 } }
adaptive:
  api: { min: 2, max: 50, policy: demand, intervalMs: 1000, cooldownMs: 60000 }
`;

// Bounds on a hang, not timed assertions: the page polls /v1/stats every second.
const WAIT = { timeout: 30_000 };

/** What the strip shows: its state, its state's words, each figure's label and value, and the state's colours. */
interface Strip {
  readonly state: string | undefined;
  readonly words: string;
  readonly figures: Record<string, { label: string; value: string; state: string | undefined }>;
  readonly colours: { readonly badge: string; readonly border: string };
}

interface StyledGlobals {
  readonly document: { querySelector(selector: string): unknown };
  getComputedStyle(node: unknown): { backgroundColor: string; borderLeftColor: string };
}

function strip(page: Page): Promise<Strip> {
  return page.evaluate(() => {
    const g = globalThis as unknown as PageGlobals & StyledGlobals;
    const { document } = g as unknown as PageGlobals;
    const root = document.querySelector('#health')!;
    const figures: Strip['figures'] = {};
    for (const f of document.querySelectorAll('#health-figures > div')) {
      figures[f.dataset.name ?? '?'] = {
        label: f.querySelector('dt')?.textContent ?? '',
        value: f.querySelector('dd')?.textContent ?? '',
        state: f.dataset.state,
      };
    }
    return {
      state: root.dataset.state,
      words: document.querySelector('#health-state')?.textContent ?? '',
      figures,
      colours: {
        badge: g.getComputedStyle(g.document.querySelector('#health-state')).backgroundColor,
        border: g.getComputedStyle(g.document.querySelector('#health')).borderLeftColor,
      },
    };
  });
}

/** Waits until the strip's `data-state` is `state`. */
async function stripState(page: Page, state: string): Promise<void> {
  await page.waitForSelector(`#health[data-state="${state}"]`, WAIT);
}

describe('the health strip on the embedded store', () => {
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

  it('says the store is reachable and labels every figure with its period, the p99 with its window', async () => {
    for (let i = 0; i < 20; i++) {
      const r = await fetch(new URL('/v1/check', server.url), {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'sluice-client-id': 'worker-1' },
        body: JSON.stringify({ resource: 'api', key: 'k' }),
      });
      expect(r.status).toBe(200);
    }
    await page.goto(`${server.url}/dashboard`);
    await stripState(page, 'ok');
    await page.waitForFunction(
      () =>
        /\d m?s$/.test(
          (globalThis as unknown as PageGlobals).document.querySelector('#health-figures [data-name="latency"] dd')
            ?.textContent ?? '',
        ),
      undefined,
      WAIT,
    );
    const shown = await strip(page);
    expect(shown.words).toBe('Healthy');
    expect(shown.figures).toEqual({
      store: { label: 'store memory', value: 'reachable', state: 'ok' },
      fallback: { label: 'fallback decisions since start', value: '0', state: 'ok' },
      clients: { label: 'live clients', value: '1', state: 'ok' },
      latency: { label: 'p99 decision latency (last 60 s)', value: expect.stringMatching(/^\d+(\.\d+)? m?s$/), state: 'ok' },
    });
    // The figure is the server's: the p99 of /v1/stats, in the strip's unit.
    const health = (await call(server.url, '/v1/stats')).json.health as { decisionP99Seconds: number };
    expect(health.decisionP99Seconds).toBeGreaterThan(0);
    expect(consoleErrors).toEqual([]);
  });
});

describe('the health strip on a Redis that goes away', () => {
  const own = serveOnOwnRedis(RULES);
  let browser: Browser;
  let page: Page;
  const consoleErrors: string[] = [];

  beforeAll(async () => {
    browser = await launchChromium();
    page = await browser.newPage();
    page.on('pageerror', (err) => consoleErrors.push(String(err)));
    page.on('console', (msg) => {
      if (msg.type() === 'error') consoleErrors.push(msg.text());
    });
  });
  afterAll(async () => {
    await browser?.close();
  });

  it('turns degraded, in words and colour, while the store is away, and comes back', async () => {
    await page.goto(`${own.server.url}/dashboard`);
    await stripState(page, 'ok');
    const ok = await strip(page);
    expect(ok.words).toBe('Healthy');
    expect(ok.figures.store).toEqual({ label: `store redis at 127.0.0.1:${own.redis.port}`, value: 'reachable', state: 'ok' });

    await own.redis.kill();
    try {
      await stripState(page, 'degraded');
      // Decisions meanwhile are the fallback's: the strip counts them (a later poll shows them).
      for (let i = 0; i < 3; i++)
        expect((await call(own.server.url, '/v1/check', { resource: 'api', key: 'k' })).status).toBe(200);
      await page.waitForFunction(
        () =>
          Number(
            (globalThis as unknown as PageGlobals).document.querySelector('#health-figures [data-name="fallback"] dd')
              ?.textContent ?? 0,
          ) >= 3,
        undefined,
        WAIT,
      );
      const degraded = await strip(page);
      expect(degraded.words).toMatch(/^DEGRADED: /);
      expect(degraded.figures.store!.state).toBe('degraded');
      expect(degraded.figures.store!.value).toMatch(/^UNREACHABLE for \d+(\.\d)? m?s \(.+\), deciding by the 'local' policy$/);
      expect(degraded.figures.latency!.label).toBe('p99 decision latency (last 60 s)');
      // Colour as well as words: the badge and the edge change with the state.
      expect(degraded.colours.badge).not.toBe(ok.colours.badge);
      expect(degraded.colours.border).not.toBe(ok.colours.border);
      // What only the store knows is said to be unknown, not "never".
      expect(await page.textContent('#adaptive tbody tr[data-resource="api"] td:last-child')).toBe('unknown (store unreachable)');
    } finally {
      await own.redis.restart();
    }
    await stripState(page, 'ok');
    const back = await strip(page);
    expect(back.words).toBe('Healthy');
    expect(back.colours).toEqual(ok.colours);
    expect(consoleErrors).toEqual([]);
  });
});
