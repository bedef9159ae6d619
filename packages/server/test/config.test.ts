/**
 * `sluice serve --config FILE` as a process: the file's settings are in force, an environment
 * variable and a flag win over them, relative rule paths are the file's neighbours, a bad file
 * stops the start with exit code 2 naming the file and key, and `--print-config` shows what is
 * in force without its secrets.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawnSluice } from '../../../test/sluice-serve.js';
import { RlsClient, call, runCli, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

const RULES = 'resources:\n  api:cfg:\n    limits: { algorithm: fixed-window, limit: 100, windowMs: 60000 }\n';
const tmp = scratch();
const servers: ServerProcess[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  tmp.remove();
});

const batch = (n: number) => ({ items: Array.from({ length: n }, (_, i) => ({ resource: 'api:cfg', key: `k${i}` })) });

describe('sluice serve --config', () => {
  it('serves with the file, gives way to the environment and flags, and finds the rules beside it', async () => {
    writeRules(tmp.dir, RULES, 'rules.yaml');
    const config = writeRules(tmp.dir, 'rules: rules.yaml\nrules-dir: versions\nmax-batch: 2\n', 'sluice.yaml');
    // Started from another directory: `rules.yaml` is found next to the file, not in the cwd.
    const fromFile = await spawnServer(['--config', config]);
    servers.push(fromFile);
    expect((await call(fromFile.url, '/v1/check', batch(2))).status).toBe(200);
    const tooMany = await call(fromFile.url, '/v1/check', batch(3));
    expect(tooMany.status).toBe(413);
    expect(tooMany.json.error.code).toBe('SLUICE_ERR_BATCH_TOO_LARGE');

    const fromEnv = await spawnServer(['--config', config, '--rules-dir', `${tmp.dir}/versions-env`], { SLUICE_MAX_BATCH: '3' });
    servers.push(fromEnv);
    expect((await call(fromEnv.url, '/v1/check', batch(3))).status).toBe(200);
    expect((await call(fromEnv.url, '/v1/check', batch(4))).status).toBe(413);
  });

  it('refuses a bad file at start with exit code 2, naming the file and the key', async () => {
    const config = writeRules(tmp.dir, 'max-batch: 2\nmax-bach: 3\n', 'typo.yaml');
    const r = await runCli(['serve', '--config', config, '--port', '0', '--grpc-port', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`${config}: max-bach: unknown setting (did you mean max-batch?)`);
  });

  it('prints the settings in force, secrets redacted, and exits', async () => {
    const config = writeRules(tmp.dir, 'port: 9123\nredis: redis://app:hunter2@redis.internal:6379\n', 'print.yaml');
    const token = 'admin-token-0123456789abcdef';
    const r = await runCli(['serve', '--config', config, '--print-config'], { SLUICE_ADMIN_TOKEN: token });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('port: 9123\n');
    expect(r.stdout).toContain('redis: redis://[REDACTED]@redis.internal:6379');
    expect(r.stdout).toContain('admin-token: "[REDACTED]"');
    expect(r.stdout).not.toContain('hunter2');
    expect(r.stdout).not.toContain(token);
  });

  it('turns either listener off, and refuses to turn off both', async () => {
    const rules = writeRules(
      tmp.dir,
      'domains:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: { unit: second, requests_per_unit: 5 }\n',
      'listeners.yaml',
    );
    const httpOnly = await spawnServer(['--rules', rules, '--rules-dir', `${tmp.dir}/l1`, '--grpc-port', 'off']);
    servers.push(httpOnly);
    expect((await call(httpOnly.url, '/healthz')).status).toBe(200);
    expect(httpOnly.grpcPort).toBeUndefined();

    const grpcOnly = await spawnSluice(['--rules', rules, '--rules-dir', `${tmp.dir}/l2`, '--port', 'off', '--grpc-port', '0']);
    servers.push(grpcOnly);
    expect(grpcOnly.url).toBeUndefined();
    expect(grpcOnly.logs.some((l) => l.includes('no HTTP listener (--port off)'))).toBe(true);
    const rls = new RlsClient(`127.0.0.1:${grpcOnly.grpcPort}`);
    try {
      const answer = await rls.shouldRateLimit({ domain: 'd', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] });
      expect(answer.overall_code).toBe('OK');
    } finally {
      rls.close();
    }

    const none = await runCli(['serve', '--rules', rules, '--port', 'off', '--grpc-port', 'off']);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('there would be nothing to serve');
    const bad = await runCli(['serve', '--rules', rules, '--grpc-port', 'of']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('must be a port number (0-65535) or off');
  });
});
