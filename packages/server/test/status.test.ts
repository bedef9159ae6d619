/**
 * `sluice status` and the `health` of `GET /v1/stats` against a real `sluice serve` on a Redis
 * of the test's own: the health line first (the store, and while it is away the policy that
 * answers; the fallback's decisions; the clients seen; the p99 decision latency of the last
 * minute), shadow-mode denials beside the denials,
 * and every column named with its unit and period. Needs `redis-server` on PATH and the built
 * CLI (`npm run build`).
 */
import { describe, expect, it } from 'vitest';
import { call, eventually, runCli, serveOnOwnRedis } from './support.js';

// One call an hour: every call after the first is over the limit. `audit` is in shadow mode.
const RULES = `
resources:
  api:strict: { limits: { algorithm: fixed-window, limit: 1, windowMs: 3600000 } }
  api:audit: { limits: { algorithm: fixed-window, limit: 1, windowMs: 3600000 }, shadow: true }
`;

/** Each resource's row of a status frame, by column name. */
function rowsOf(stdout: string): Map<string, Record<string, string>> {
  const lines = stdout.trim().split('\n');
  const at = lines.findIndex((l) => l.startsWith('RESOURCE '));
  // Column names hold single spaces; columns are two or more apart.
  const names = lines[at]!.split(/\s{2,}/);
  const rows = new Map<string, Record<string, string>>();
  for (const line of lines.slice(at + 1)) {
    if (line.trim() === '') break;
    const cells = line.split(/\s{2,}/);
    rows.set(cells[0]!, Object.fromEntries(names.map((n, i) => [n, cells[i]!])));
  }
  return rows;
}

/** Sum of a counter's series in a server's Prometheus text. */
async function counterSum(url: string, name: string): Promise<number> {
  const text = await (await fetch(new URL('/metrics', url))).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .reduce((sum, l) => sum + Number(l.split(' ').at(-1)), 0);
}

describe('sluice status against a running server', () => {
  const own = serveOnOwnRedis(RULES);

  const check = (resource: string, client: string, key = 'k') =>
    fetch(new URL('/v1/check', own.server.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'sluice-client-id': client },
      body: JSON.stringify({ resource, key }),
    });

  it('opens with the health line and shows shadow-mode denials beside the denials', async () => {
    for (let i = 0; i < 10; i++) {
      await check('api:strict', 'worker-1');
      await check('api:audit', 'worker-2');
    }
    const stats = await call(own.server.url, '/v1/stats');
    expect(stats.json.health).toMatchObject({
      store: 'redis',
      address: `127.0.0.1:${own.redis.port}`,
      reachable: true,
      policy: 'local',
      policies: "the 'local' policy",
      fallbackDecisions: 0,
      clientsSeen: 2,
    });
    expect(stats.json.health.unreachableForMs).toBeUndefined();
    // The decisions just made are in the last minute's p99 (seconds, finite, not zero).
    expect(stats.json.health.decisionP99WindowSeconds).toBe(60);
    expect(stats.json.health.decisionP99Seconds).toBeGreaterThan(0);
    expect(stats.json.health.decisionP99Seconds).toBeLessThan(60);

    const r = await runCli(['status', '--once', '--interval', '200', '--server', own.server.url]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/\(rates per second over the last \d+\.\d s\)$/);
    expect(lines[1]).toMatch(
      new RegExp(
        `^store redis at 127\\.0\\.0\\.1:${own.redis.port}: reachable  \\|  fallback decisions since start: 0  \\|  ` +
          'live clients: 2  \\|  p99 decision latency \\(last 60 s\\): [\\d.]+ m?s$',
      ),
    );
    const rows = rowsOf(r.stdout);
    // 9 of 10 denied; in shadow mode, 9 of 10 admitted only because of it.
    expect(rows.get('api:strict')).toMatchObject({ 'DENIED % SINCE START': '90.0%', 'SHADOW DENIED % SINCE START': '0.0%' });
    expect(rows.get('api:audit')).toMatchObject({ 'DENIED % SINCE START': '0.0%', 'SHADOW DENIED % SINCE START': '90.0%' });
    expect([...rows.values()][0]).toHaveProperty('SHADOW DENIED/s');
  });

  it('says while the store is away which policy answers and how many decisions the fallback made', async () => {
    await own.redis.kill();
    try {
      await eventually(async () => (await call(own.server.url, '/v1/stats')).json.health.reachable === false);
      // A key the pre-filter does not know over its limit: decided by the local share of the
      // limit (its first call admitted, the rest denied).
      const allowed: boolean[] = [];
      for (let i = 0; i < 5; i++) {
        const answer = (await (await check('api:strict', 'worker-1', 'fresh')).json()) as { allowed: boolean; source?: string };
        expect(answer.source).toBe('fallback');
        allowed.push(answer.allowed);
      }
      expect(allowed).toEqual([true, false, false, false, false]);
      const stats = await call(own.server.url, '/v1/stats');
      const health = stats.json.health as { fallbackDecisions: number; unreachableForMs?: number; reason?: string };
      expect(health).toMatchObject({ store: 'redis', reachable: false, policy: 'local' });
      expect(health.unreachableForMs).toBeGreaterThanOrEqual(0);
      expect(typeof health.reason).toBe('string');
      expect(health.fallbackDecisions).toBeGreaterThanOrEqual(5);
      // One number: the fallback's decisions as /metrics counts them.
      expect(await counterSum(own.server.url, 'sluice_fallback_decisions_total')).toBe(health.fallbackDecisions);

      const r = await runCli(['status', '--once', '--interval', '200', '--server', own.server.url]);
      expect(r.code, r.stderr).toBe(0);
      const line = r.stdout.split('\n')[1]!;
      expect(line).toMatch(
        new RegExp(
          `^store redis at 127\\.0\\.0\\.1:${own.redis.port}: UNREACHABLE for \\d+(\\.\\d)? m?s \\(.+\\), deciding by the 'local' policy  \\|  ` +
            'fallback decisions since start: \\d+  \\|  live clients: \\d+  \\|  p99 decision latency \\(last 60 s\\): [\\d.]+ m?s$',
        ),
      );
      expect(Number(/fallback decisions since start: (\d+)/.exec(line)![1])).toBeGreaterThanOrEqual(health.fallbackDecisions);
    } finally {
      await own.redis.restart();
    }
    await eventually(async () => (await call(own.server.url, '/v1/stats')).json.health.reachable === true);
  });
});
