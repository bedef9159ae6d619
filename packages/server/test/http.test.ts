/* eslint-disable @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-return, @typescript-eslint/no-unsafe-argument --
   the assertions read parsed JSON and protobuf answers dynamically */
import { spawnSync } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, call, eventually, scratch, startTestServer, writeRules, type TestServer } from './support.js';
import { SLUICE_BIN, childEnv, rulesFile, spawnSluice } from '../../../test/sluice-serve.js';

const V1 = `
resources:
  api:fixed: { limits: { algorithm: fixed-window, limit: 3, windowMs: 60000 } }
  db:pool: { limits: { algorithm: concurrency, limit: 1, permitTtlMs: 60000 } }
  api:paced: { limits: { algorithm: gcra, limit: 20, windowMs: 1000, burst: 1 } }
`;
const V2 = `
resources:
  api:fixed: { limits: { algorithm: fixed-window, limit: 10, windowMs: 60000 } }
  db:pool: { limits: { algorithm: concurrency, limit: 1, permitTtlMs: 60000 } }
`;

describe('sluice serve over HTTP (embedded store)', () => {
  const tmp = scratch();
  let server: TestServer;
  let rulesFile: string;
  const admin = (path: string, body?: unknown, token: string | null = TOKEN) =>
    call(server.url, path, body, token === null ? {} : { token });

  beforeAll(async () => {
    rulesFile = writeRules(tmp.dir, V1);
    server = await startTestServer({ rules: [rulesFile] });
  });
  afterAll(async () => {
    await server?.close();
    tmp.remove();
  });

  it('is ready with the seeded version', async () => {
    expect((await call(server.url, '/healthz')).json).toEqual({ status: 'ok' });
    const ready = await call(server.url, '/readyz');
    expect(ready.status).toBe(200);
    expect(ready.json).toMatchObject({ status: 'ready', rules: 'version 1', limitStore: 'ok', ruleStore: 'ok' });
  });

  it('decides checks against the limit', async () => {
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await call(server.url, '/v1/check', { resource: 'api:fixed', key: 'k-check' }));
    expect(answers.map((a) => a.json.allowed)).toEqual([true, true, true, false]);
    expect(answers[3]!.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(answers[3]!.status).toBe(200);
    // The IETF draft's fields, named after the resource; the denial's reset is its Retry-After.
    expect(answers[0]!.headers.get('ratelimit-policy')).toBe('"api:fixed";q=3;w=60');
    expect(answers[0]!.headers.get('ratelimit')).toMatch(/^"api:fixed";r=2;t=\d+$/);
    expect(answers[3]!.headers.get('ratelimit')).toBe(`"api:fixed";r=0;t=${answers[3]!.headers.get('retry-after')}`);
    expect(answers[0]!.headers.get('ratelimit-limit')).toBeNull();
  });

  it('makes acquire wait until a permit is released', async () => {
    const first = await call(server.url, '/v1/acquire', { resource: 'db:pool', key: 'wait' });
    expect(first.json).toMatchObject({ allowed: true, permitId: expect.any(String) });
    const waiting = call(server.url, '/v1/acquire', { resource: 'db:pool', key: 'wait', maxWaitMs: 20_000 });
    let settled = false;
    void waiting.then(() => (settled = true));
    // The second caller is queued (the wait metric has no sample yet) and has no answer.
    await new Promise((r) => setTimeout(r, 100));
    expect(settled).toBe(false);
    const released = await call(server.url, '/v1/release', { resource: 'db:pool', key: 'wait', permitId: first.json.permitId });
    expect(released.json).toEqual({ released: true });
    const second = await waiting;
    expect(second.json).toMatchObject({ allowed: true, reason: 'allowed', waitedMs: expect.any(Number) });
    await call(server.url, '/v1/release', { resource: 'db:pool', key: 'wait', permitId: second.json.permitId });
  });

  it('stops a wait when its client disconnects', async () => {
    const first = await call(server.url, '/v1/acquire', { resource: 'db:pool', key: 'gone' });
    expect(first.json.allowed).toBe(true);
    // A raw request we can cut while it waits.
    const req = httpRequest(new URL('/v1/acquire', server.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
    });
    req.on('error', () => undefined);
    req.end(JSON.stringify({ resource: 'db:pool', key: 'gone', maxWaitMs: 20_000 }));
    // Give the request time to reach the queue before cutting it.
    await new Promise((r) => setTimeout(r, 200));
    req.destroy();
    // The aborted waiter must not take the permit released next: a later caller gets it.
    await eventually(async () =>
      /sluice_wait_seconds_count\{resource="db:pool",outcome="aborted"\} 1/.test(await server.metrics.registry.metrics()),
    );
    await call(server.url, '/v1/release', { resource: 'db:pool', key: 'gone', permitId: first.json.permitId });
    const next = await call(server.url, '/v1/acquire', { resource: 'db:pool', key: 'gone', maxWaitMs: 0 });
    expect(next.json).toMatchObject({ allowed: true });
  });

  it('answers a batch of acquires item by item', async () => {
    const res = await call(server.url, '/v1/acquire', {
      items: [{ resource: 'api:paced', key: 'b' }, { resource: 'api:paced', key: 'b', maxWaitMs: 5000 }, { resource: 'missing' }],
    });
    expect(res.status).toBe(200);
    expect(res.json.results[0]).toMatchObject({ allowed: true });
    // Paced at 20/s with a burst of 1: the second waited for its turn.
    expect(res.json.results[1]).toMatchObject({ allowed: true, waitedMs: expect.any(Number) });
    expect(res.json.results[1].waitedMs).toBeGreaterThan(0);
    expect(res.json.results[2].error.code).toBe('SLUICE_ERR_UNKNOWN_RESOURCE');
  });

  it('refuses admin calls without the token and changes nothing', async () => {
    const before = (await admin('/v1/admin/rules/history')).json.versions.length;
    for (const token of [null, 'wrong-token-0123456789', `${TOKEN}x`]) {
      const apply = await admin('/v1/admin/rules', { text: V2, author: 'mallory', reason: 'x' }, token);
      expect(apply.status).toBe(401);
      expect(apply.json.error.code).toBe('SLUICE_ERR_UNAUTHORIZED');
      expect((await admin('/v1/admin/rules/rollback', { version: 1, author: 'm', reason: 'x' }, token)).status).toBe(401);
      expect((await admin('/v1/admin/rules/history', undefined, token)).status).toBe(401);
    }
    expect((await admin('/v1/admin/rules/history')).json.versions).toHaveLength(before);
    expect(server.rules.version?.version).toBe(before);
  });

  it('refuses invalid rules with every issue, and keeps the active version', async () => {
    const res = await admin('/v1/admin/rules', {
      text: 'resources:\n  x: { limits: { algorithm: nope, limit: 0 } }\n',
      author: 'a',
      reason: 'r',
      file: 'bad.yaml',
    });
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe('SLUICE_ERR_INVALID_RULES');
    expect(res.json.error.issues[0]).toMatchObject({ file: 'bad.yaml', path: expect.stringContaining('resources.x.limits') });
    expect(server.rules.version?.version).toBe(1);
  });

  it('applies, diffs and rolls back, changing decisions live', async () => {
    const limitOf = async () =>
      (await call(server.url, '/v1/check', { resource: 'api:fixed', key: `probe-${Math.random()}` })).json.limit;
    expect(await limitOf()).toBe(3);
    const applied = await admin('/v1/admin/rules', { text: V2, author: 'ana', reason: 'raise api:fixed', expectedVersion: 1 });
    expect(applied.status).toBe(201);
    expect(applied.json).toMatchObject({ version: 2, author: 'ana', reason: 'raise api:fixed', source: V2 });
    expect(await limitOf()).toBe(10);
    expect((await call(server.url, '/v1/check', { resource: 'api:paced' })).json.error.code).toBe('SLUICE_ERR_UNKNOWN_RESOURCE');

    const conflict = await admin('/v1/admin/rules', { text: V1, author: 'bob', reason: 'stale', expectedVersion: 1 });
    expect(conflict.status).toBe(409);
    expect(conflict.json.error.code).toBe('SLUICE_ERR_RULE_CONFLICT');

    const diff = await admin('/v1/admin/rules/diff?from=1&to=2');
    expect(diff.json.resources.removed).toEqual(['api:paced']);
    expect(diff.json.resources.changed).toEqual([
      { name: 'api:fixed', changes: [expect.objectContaining({ path: 'limits[0].limit', before: 3, after: 10 })] },
    ]);
    expect(diff.json.text).toContain('+  api:fixed: { limits: { algorithm: fixed-window, limit: 10');

    const back = await admin('/v1/admin/rules/rollback', { version: 1, author: 'ana', reason: 'revert' });
    expect(back.status).toBe(201);
    expect(back.json).toMatchObject({ version: 3, rolledBackFrom: 1, source: V1 });
    expect(await limitOf()).toBe(3);
    expect((await call(server.url, '/v1/check', { resource: 'api:paced' })).json.allowed).toBe(true);

    const history = await admin('/v1/admin/rules/history?limit=2');
    expect(history.json.versions.map((v: { version: number }) => v.version)).toEqual([3, 2]);
    expect((await admin('/v1/admin/rules?version=2')).json.source).toBe(V2);
    expect((await admin('/v1/admin/rules?version=99')).json.error.code).toBe('SLUICE_ERR_RULE_VERSION_NOT_FOUND');
    expect((await admin('/v1/admin/rules/diff?from=0')).status).toBe(400);
    const metrics = await call(server.url, '/metrics');
    expect(metrics.json).toMatch(/^sluice_rules_version 3$/m);
  });

  it('keeps rule versions across restarts; the rule file only seeds', async () => {
    await server.close();
    writeRules(tmp.dir, V2);
    server = await startTestServer({ rules: [rulesFile] });
    expect(server.rules.version?.version).toBe(3);
    expect((await call(server.url, '/v1/check', { resource: 'api:fixed', key: 'after-restart' })).json.limit).toBe(3);
  });
});

describe('sluice serve --ratelimit-headers (a real process)', () => {
  it("sends the earlier drafts' fields beside the draft's with SLUICE_RATELIMIT_HEADERS=both, and refuses a bad form", async () => {
    const rules = rulesFile(V1);
    const serve = await spawnSluice(['--port', '0', '--grpc-port', '0', '--rules', rules.path], {
      SLUICE_RATELIMIT_HEADERS: 'both',
    });
    try {
      const a = await call(serve.url, '/v1/check', { resource: 'api:fixed', key: 'h' });
      expect(a.headers.get('ratelimit-policy')).toBe('"api:fixed";q=3;w=60');
      expect(a.headers.get('ratelimit')).toMatch(/^"api:fixed";r=2;t=\d+$/);
      expect(a.headers.get('ratelimit-limit')).toBe('3');
      expect(a.headers.get('ratelimit-remaining')).toBe('2');
      expect(a.headers.get('ratelimit-reset')).toMatch(/^\d+$/);
    } finally {
      expect(await serve.stop()).toBe(0);
      rules.remove();
    }
    const bad = spawnSync(process.execPath, [SLUICE_BIN, 'serve', '--ratelimit-headers', 'rfc'], {
      env: childEnv(),
      encoding: 'utf8',
    });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain('must be draft, legacy or both');
  });
});
