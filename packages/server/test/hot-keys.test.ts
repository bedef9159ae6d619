/* eslint-disable @typescript-eslint/no-unsafe-call --
   the assertions read parsed JSON answers dynamically */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, call, runCli, scratch, startTestServer, writeRules, type TestServer } from './support.js';

// A key is hot at 0.3 calls a second over a minute's window (18 calls) that are half of the
// resource's calls. The window is far longer than the test, so nothing cools while it runs.
const RULES = `
resources:
  api:payments:
    limits: { algorithm: fixed-window, limit: 1000000, windowMs: 60000 }
    hotKeys:
      windowMs: 60000
      threshold: { rate: 0.3, share: 0.5 }
      action: lease
      lease: { ttlMs: 1000 }
  api:plain: { limits: { algorithm: fixed-window, limit: 100, windowMs: 60000 } }
`;

describe('hot keys through the service', () => {
  const tmp = scratch();
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({ rules: [writeRules(tmp.dir, RULES)] });
  });
  afterAll(async () => {
    await server?.close();
    tmp.remove();
  });

  it('reports the heaviest keys on /v1/stats, leases a hot one, and counts mitigations in /metrics', async () => {
    for (let i = 0; i < 5; i++) await call(server.url, '/v1/check', { resource: 'api:payments', key: `merchant-${i}` });
    let stats = (await call(server.url, '/v1/stats')).json;
    expect(stats.hotKeys).toHaveLength(1);
    expect(stats.hotKeys[0]).toMatchObject({ resource: 'api:payments', mitigated: 0 });
    for (let i = 0; i < 40; i++) {
      const r = await call(server.url, '/v1/check', { resource: 'api:payments', key: 'channel-7' });
      expect(r.json.allowed).toBe(true);
    }
    // Keys are the callers' data: the public snapshot counts them and names none.
    const open = (await call(server.url, '/v1/stats')).json;
    expect(open.hotKeys[0]).toMatchObject({ resource: 'api:payments', mitigated: 1, keys: [], keysHidden: true });
    expect(JSON.stringify(open)).not.toContain('channel-7');
    expect(JSON.stringify((await call(server.url, '/v1/stats', undefined, { token: 'not-the-token' })).json)).not.toContain(
      'channel-7',
    );
    stats = (await call(server.url, '/v1/stats', undefined, { token: TOKEN })).json;
    const top = stats.hotKeys[0];
    expect(top).toMatchObject({ resource: 'api:payments', windowMs: 60_000, mitigated: 1 });
    expect(top.keys[0]).toMatchObject({ key: 'channel-7', calls: 40, mitigation: 'lease' });
    expect(top.keys[0].share).toBeCloseTo(40 / 45, 2);
    expect(top.keys.slice(1).every((k: { mitigation?: string }) => k.mitigation === undefined)).toBe(true);
    // Decisions for the hot key now come from leased batches.
    const leased = await call(server.url, '/v1/check', { resource: 'api:payments', key: 'channel-7' });
    expect(leased.json.allowed).toBe(true);
    const metrics = (await call(server.url, '/metrics')).json as string;
    expect(metrics).toMatch(/sluice_hot_keys_mitigated\{resource="api:payments",action="lease"\} 1/);
    expect(metrics).toMatch(/sluice_hot_key_mitigations_total\{resource="api:payments",action="lease"\} 1/);
    // No metric is labelled by a caller key.
    expect(metrics).not.toContain('channel-7');
  });

  it('shows the hot keys in `sluice status`, named only with the admin token', async () => {
    const status = async (env: Record<string, string>) => {
      const r = await runCli(['status', '--once', '--interval', '200', '--server', server.url], env);
      expect(r.code, r.stderr).toBe(0);
      const lines = r.stdout.split('\n');
      const at = lines.indexOf('HOT KEYS');
      expect(at).toBeGreaterThan(0);
      expect(lines[at + 1]).toMatch(/^api:payments {2}\d+ calls in 60 s, 1 mitigated$/);
      return lines[at + 2];
    };
    expect(await status({ SLUICE_ADMIN_TOKEN: TOKEN })).toMatch(/^ {2}channel-7\s+[\d.]+\/s\s+[\d.]+%\s+lease$/);
    expect(await status({})).toMatch(/keys are named only to the admin/);
  });
});
