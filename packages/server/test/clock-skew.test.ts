/* eslint-disable @typescript-eslint/no-unsafe-argument, @typescript-eslint/no-explicit-any, @typescript-eslint/no-unsafe-return --
   the assertions read parsed JSON answers dynamically */
/**
 * A `sluice serve` on Redis whose wall clock runs 5 s ahead (preloaded shift): it measures the
 * skew against Redis' clock, warns once in its log, exports it on /metrics, answers it in
 * /v1/stats and /v1/time, and shows it in `sluice status` and on the dashboard (headless Chromium).
 */
import { pathToFileURL } from 'node:url';
import type { Browser } from 'playwright-core';
import { RemoteLimiter } from '@sluice/client';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { randomPrefix } from '../../../test/env.js';
import { deleteRedisKeys, rulesFile, spawnSluice, storeFlags, type Serve } from '../../../test/sluice-serve.js';
import { launchChromium } from './browser.js';
import { runCli } from './support.js';

const SHIFT_MS = 5000;
const SHIFT = pathToFileURL(new URL('./fixtures/shifted-clock.mjs', import.meta.url).pathname).href;
// Bounds on a hang, not timed assertions: the page polls /v1/stats every second.
const WAIT = { timeout: 30_000 };

async function getJson(url: string): Promise<{ status: number; json: any }> {
  const res = await fetch(url);
  return { status: res.status, json: await res.json() };
}

/** The clock line of a server 5 s ahead: its figure within the threshold of the true shift. */
function expectSkewLine(line: string | null | undefined): void {
  const m = /^clock: (\d+) ms ahead of redis \(± \d+ ms\) {2}OVER 1000 ms$/.exec(line ?? '');
  expect(m, line ?? '').not.toBeNull();
  expect(Math.abs(Number(m![1]) - SHIFT_MS)).toBeLessThan(1000);
}

describe('a server whose clock is 5 s ahead of Redis', () => {
  const rules = rulesFile('resources:\n  api: { limits: { algorithm: gcra, limit: 5, windowMs: 1000 } }\n');
  const prefix = randomPrefix('skew-serve');
  let server: Serve;
  let browser: Browser;

  beforeAll(async () => {
    [server, browser] = await Promise.all([
      spawnSluice(['--rules', rules.path, '--port', '0', '--grpc-port', '0', ...storeFlags('redis', prefix)], {
        NODE_OPTIONS: `--import=${SHIFT}`,
        TEST_CLOCK_SHIFT_MS: String(SHIFT_MS),
        SLUICE_SKEW_INTERVAL_MS: '1000',
      }),
      launchChromium(),
    ]);
  });
  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    rules.remove();
    await deleteRedisKeys(prefix);
  });

  it('measures the skew within its uncertainty, warns once and exports it', async () => {
    // The first reading is taken as the server starts, but not awaited by it: wait for it.
    const stats = await vi.waitFor(async () => {
      const { json } = await getJson(`${server.url}/v1/stats`);
      expect(json.clockSkew).toMatchObject({ store: 'redis', measured: true, skewed: true, thresholdMs: 1000, warnings: 1 });
      return json;
    }, WAIT);
    // Date.now() is whole ms while Redis answers µs: 1 ms of rounding on top of the uncertainty.
    expect(Math.abs(stats.clockSkew.offsetMs + SHIFT_MS)).toBeLessThanOrEqual(stats.clockSkew.uncertaintyMs + 1);
    await vi.waitFor(() => expect(server.logs.some((l) => l.includes("differs from the store's"))).toBe(true), WAIT);
    const warnings = server.logs.filter((l) => l.includes("differs from the store's"));
    expect(warnings).toHaveLength(1);
    expect(JSON.parse(warnings[0]!)).toMatchObject({ level: 'warn', store: 'redis', thresholdMs: 1000 });
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const skew = Number(/^sluice_clock_skew_seconds (\S+)$/m.exec(metrics)?.[1]) * 1000;
    expect(Math.abs(skew + SHIFT_MS)).toBeLessThanOrEqual(stats.clockSkew.uncertaintyMs + 1);
    expect(metrics).toMatch(/^sluice_clock_skew_warnings_total 1$/m);
    // /v1/time answers Redis' clock (not the shifted one) within its uncertainty.
    const before = Date.now();
    const { status, json: time } = await getJson(`${server.url}/v1/time`);
    const after = Date.now();
    expect(status).toBe(200);
    expect(time.store).toBe('redis');
    const slack = time.uncertaintyMs + 1;
    expect(time.timeMs).toBeGreaterThanOrEqual(before - slack);
    expect(time.timeMs).toBeLessThanOrEqual(after + slack);
  });

  it("lets a remote client measure its own skew against Redis' clock, not the server's", async () => {
    // This process's clock is not shifted: its skew to the store is about 0, though the server's is 5 s.
    const client = new RemoteLimiter({ url: server.url, clockSkew: { intervalMs: 1000 }, logger: false });
    try {
      await vi.waitFor(() => expect(client.clockSkew!.estimate.measured).toBe(true), { timeout: 10_000, interval: 50 });
      const s = client.clockSkew!.status();
      expect(Math.abs(s.offsetMs)).toBeLessThanOrEqual(s.uncertaintyMs + 1);
      expect(s).toMatchObject({ skewed: false, warnings: 0 });
    } finally {
      await client.close();
    }
  });

  it('shows the skew in sluice status', async () => {
    const r = await runCli(['status', '--once', '--interval', '200', '--server', server.url]);
    expect(r.code, r.stderr).toBe(0);
    expectSkewLine(r.stdout.trim().split('\n').at(-1));
  });

  it('shows the skew on the dashboard, flagged', async () => {
    const page = await browser.newPage();
    await page.goto(`${server.url}/dashboard`);
    await page.waitForSelector('#clock-skew[data-state="skewed"]', WAIT);
    expectSkewLine(await page.textContent('#clock-skew'));
    await page.close();
  });
});
