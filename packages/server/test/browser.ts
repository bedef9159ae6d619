/**
 * Headless Chromium for the dashboard tests, driven by playwright-core (which downloads no
 * browser): the binary is the one scripts/chromium.sh publishes as SLUICE_CHROMIUM_PATH.
 */
import { chromium, type Browser } from 'playwright-core';

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
