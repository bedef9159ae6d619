/**
 * Headless Chromium for the dashboard tests, driven by playwright-core (which downloads no
 * browser): the binary is the one scripts/chromium.sh publishes as SLUICE_CHROMIUM_PATH.
 */
import { chromium, type Browser, type Page } from 'playwright-core';
import { spawnServe, type Serve } from '../../../test/sluice-serve.js';

/** The Chromium binary; fails loudly when the variable is missing. */
export function chromiumPath(): string {
  const path = process.env.SLUICE_CHROMIUM_PATH;
  if (!path) {
    throw new Error(
      'SLUICE_CHROMIUM_PATH is not set: run the tests with "npm run test:all", or "bash scripts/chromium.sh install && bash scripts/chromium.sh start" and source its chromium.env',
    );
  }
  return path;
}

/** Launches headless Chromium (without its sandbox when running as root, which it refuses otherwise). */
export function launchChromium(): Promise<Browser> {
  const asRoot = process.getuid?.() === 0;
  return chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: asRoot ? ['--no-sandbox'] : [],
  });
}

/** A `sluice serve` on the embedded store and a Chromium page, for one dashboard test file. */
export interface DashboardRun {
  readonly server: Serve;
  readonly browser: Browser;
  readonly page: Page;
  /** The page's console errors and uncaught exceptions so far. */
  readonly consoleErrors: string[];
  /** Closes the browser, then stops the server. */
  close(): Promise<void>;
}

/** Starts the service on the rule file at `rules` and opens a page that records its console errors. */
export async function openDashboard(rules: string): Promise<DashboardRun> {
  const [server, browser] = await Promise.all([spawnServe({ rules }), launchChromium()]);
  const page = await browser.newPage();
  const consoleErrors: string[] = [];
  page.on('console', (msg) => {
    if (msg.type() === 'error') consoleErrors.push(msg.text());
  });
  page.on('pageerror', (err) => consoleErrors.push(String(err)));
  return {
    server,
    browser,
    page,
    consoleErrors,
    close: async () => {
      await browser.close();
      await server.stop();
    },
  };
}

/** The little of a DOM element that page functions read (the tests compile without the DOM library). */
export interface PageElement {
  readonly textContent: string | null;
  readonly dataset: Readonly<Record<string, string | undefined>>;
  querySelector(selector: string): PageElement | null;
}

/**
 * The browser globals page functions use, for `const { document } = globalThis as unknown as
 * PageGlobals` inside `page.evaluate` and `page.waitForFunction` callbacks.
 */
export interface PageGlobals {
  readonly document: {
    querySelector(selector: string): PageElement | null;
    querySelectorAll(selector: string): Iterable<PageElement>;
  };
  readonly sessionStorage: { getItem(key: string): string | null };
  readonly __xss?: unknown;
}
