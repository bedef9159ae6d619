/**
 * `sluice serve` as operators run it: SIGHUP reloads and never ends the process, rule files are
 * the source of truth with `--rules-mode files` (a change on disk becomes one new version that
 * every server sharing the store follows), and `/readyz` keeps a server in its Service while its
 * Redis is away, saying so, as long as it can answer decisions.
 */
import { writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { CutProxy } from '../../../test/cut-proxy.js';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { metric } from '../../../test/sluice-serve.js';
import { admin, call, eventually, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

const tmp = scratch();
const servers: ServerProcess[] = [];
const proxies: CutProxy[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  await Promise.all(proxies.map((p) => p.down()));
  tmp.remove();
});
const rules = (limit: number) =>
  `resources:\n  api:r:\n    limits: { algorithm: fixed-window, limit: ${limit}, windowMs: 60000 }\n`;
/** A server's log line for each time it followed the rule files (applied them, or found them in force). */
const FOLLOWED = /rule files (applied as a new version|read again: (no change|another server applied them first))/;
const limitOf = async (s: ServerProcess) =>
  (await call(s.url, '/v1/check', { resource: 'api:r', key: `k${Math.random()}` })).json.limit as number;
const start = async (args: string[], env: Record<string, string> = {}) => {
  const s = await spawnServer(args, env);
  servers.push(s);
  return s;
};

describe('reload and rules as code', () => {
  it('takes SIGHUP without ending, and reads the rule files and the configuration file again', async () => {
    const file = writeRules(tmp.dir, rules(10), 'hup.yaml');
    const config = writeRules(tmp.dir, `rules: hup.yaml\nrules-dir: hup.versions\nlog-level: info\n`, 'hup-config.yaml');
    const s = await start(['--config', config]);
    writeFileSync(file, rules(20));
    writeFileSync(config, `rules: hup.yaml\nrules-dir: hup.versions\nlog-level: debug\nmax-batch: 7\n`);
    s.child.kill('SIGHUP');
    await eventually(async () => s.logs.some((l) => l.includes('rule files differ from the version in force and are ignored')));
    expect(s.child.exitCode).toBeNull();
    expect((await call(s.url, '/healthz')).status).toBe(200);
    // seed mode: the store's version stands, and the operator is told.
    expect(await limitOf(s)).toBe(10);
    expect(s.logs.some((l) => l.includes('"settings":["max-batch"]') && l.includes('next restart'))).toBe(true);
    // A broken configuration file changes nothing and ends nothing.
    writeFileSync(config, 'max-bach: 3\n');
    s.child.kill('SIGHUP');
    await eventually(async () => s.logs.some((l) => l.includes('configuration file not read again')));
    expect((await call(s.url, '/healthz')).status).toBe(200);
  });

  it('with --rules-mode files, a changed file becomes one new version on every server sharing the store', async () => {
    const file = writeRules(tmp.dir, rules(10), 'fleet.yaml');
    const prefix = randomPrefix('rules-as-code');
    const flags = ['--rules', file, '--rules-mode', 'files', '--redis', redisUrl(), '--redis-prefix', prefix];
    const [a, b] = await Promise.all([start(flags), start(flags)]);
    expect(await limitOf(a)).toBe(10);
    let history = (await admin(a, '/rules/history')).json;
    expect(history.versions).toHaveLength(1);

    // Each server polls the file itself, and one may see the change after the other's new version
    // reached it: an admin change made before that late poll would be undone by it (the files win
    // when their content changes). So wait until both have followed the change.
    const follows = (s: ServerProcess) => s.logs.filter((l) => FOLLOWED.test(l)).length;
    const before = [follows(a), follows(b)];
    writeFileSync(file, rules(25));
    await eventually(
      async () => (await limitOf(a)) === 25 && (await limitOf(b)) === 25 && follows(a) > before[0]! && follows(b) > before[1]!,
      30_000,
      100,
    );
    history = (await admin(a, '/rules/history')).json;
    expect(history.versions).toHaveLength(2);
    expect(history.versions[0].author).toBe('rule files: fleet.yaml');
    expect(history.versions[0].reason).toContain((history.versions[0].hash as string).slice(0, 16));

    // An admin change lasts until the files are read again; then the files win, in the history.
    expect((await admin(a, '/rules', { text: rules(99), author: 'ops', reason: 'by hand' })).status).toBe(201);
    await eventually(async () => (await limitOf(b)) === 99, 30_000, 100);
    b.child.kill('SIGHUP');
    await eventually(async () => (await limitOf(a)) === 25, 30_000, 100);
    expect((await admin(a, '/rules/history')).json.versions).toHaveLength(4);

    // An invalid file is refused, counted and logged; the version in force stays.
    writeFileSync(file, 'resources:\n  api:r:\n    limits: { algorithm: nope }\n');
    await eventually(async () => (await metric(a.url, 'sluice_warnings_total', 'event="rule_files_refused"')) >= 1, 30_000, 100);
    expect(await limitOf(a)).toBe(25);
    expect(a.logs.some((l) => l.includes('rule files not applied'))).toBe(true);
  });

  it('stays ready while Redis is away, saying what answers meanwhile', async () => {
    const url = new URL(redisUrl());
    const proxy = await CutProxy.start(url.hostname, Number(url.port));
    proxies.push(proxy);
    const file = writeRules(tmp.dir, rules(10), 'ready.yaml');
    const s = await start([
      '--rules', file, '--redis', `redis://127.0.0.1:${proxy.port}`, '--redis-prefix', randomPrefix('ready'),
      '--store-timeout-ms', '200', '--on-store-failure', 'local',
    ]); // prettier-ignore
    const ok = await call(s.url, '/readyz');
    expect(ok.status).toBe(200);
    expect(ok.json).toMatchObject({ status: 'ready', limitStore: 'ok', ruleStore: 'ok', rules: 'version 1' });

    await proxy.down();
    await eventually(async () => (await call(s.url, '/readyz')).json.status === 'degraded', 30_000, 100);
    const degraded = await call(s.url, '/readyz');
    expect(degraded.status).toBe(200);
    expect(degraded.json.limitStore).toMatch(
      /^unavailable .*: decisions follow each resource's store-failure policy \(default local\)$/,
    );
    expect(JSON.stringify(degraded.json)).not.toMatch(/maxRetriesPerRequest|ECONNREFUSED|ioredis/);
    // And decisions do flow, by the store-failure policy.
    const decided = await call(s.url, '/v1/check', { resource: 'api:r', key: 'during' });
    expect(decided.status).toBe(200);
    expect(decided.json.source).toBe('fallback');

    await proxy.up();
    await eventually(async () => (await call(s.url, '/readyz')).json.status === 'ready', 30_000, 100);
    // Draining is not ready.
    const stopped = s.stop();
    await eventually(
      async () => {
        const r = await call(s.url, '/readyz').catch(() => undefined);
        return r === undefined || (r.status === 503 && r.json.status === 'draining');
      },
      30_000,
      10,
    );
    await stopped;
  });
});
