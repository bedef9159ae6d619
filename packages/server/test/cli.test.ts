import { readFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SLUICE_BIN, childEnv } from '../../../test/sluice-serve.js';
import { TOKEN, call, runCli, scratch, spawnServer, startTestServer, writeRules, type TestServer } from './support.js';

const EXAMPLE = fileURLToPath(new URL('../examples/rules.yaml', import.meta.url));

const V1 = `
resources:
  api:one: { limits: { algorithm: fixed-window, limit: 100, windowMs: 60000 } }
domains:
  - domain: edge
    descriptors:
      - key: ip
        rate_limit: { unit: second, requests_per_unit: 1000000 }
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 2 }
`;
const V2 = V1.replace('limit: 100,', 'limit: 200,');

describe('the sluice command line', () => {
  const tmp = scratch();
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({ rules: [writeRules(tmp.dir, V1)] });
  });
  afterAll(async () => {
    await server?.close();
    tmp.remove();
  });

  it('prints help for every command', async () => {
    const top = await runCli(['--help']);
    expect(top.code).toBe(0);
    for (const cmd of ['serve', 'rules', 'status', 'bench']) expect(top.stdout).toContain(cmd);
    const serve = await runCli(['serve', '--help']);
    expect(serve.code).toBe(0);
    expect(serve.stdout).toContain('--grpc-port');
    expect(serve.stdout).toContain('SLUICE_REDIS_URL');
    expect((await runCli(['rules', 'apply', '--help'])).stdout).toContain('--expected-version');
  });

  it('validates rule files offline', async () => {
    const ok = await runCli(['rules', 'validate', EXAMPLE]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/^ok: .*rules\.yaml: 3 resource\(s\), 1 envoy domain\(s\)/);
    const bad = writeRules(
      tmp.dir,
      'resources:\n  db:x:\n    limits: { algorithm: gcra, limit: 0 }\n    colour: red\n',
      'bad.yaml',
    );
    const r = await runCli(['rules', 'validate', bad]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${bad}: resources."db:x"`);
    expect(r.stderr.trim().split('\n').length).toBeGreaterThanOrEqual(1);
    const missing = await runCli(['rules', 'validate', `${tmp.dir}/missing.yaml`]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('missing.yaml: cannot be read (ENOENT)');
  });

  it('refuses bad settings and usage with exit code 2', async () => {
    const r = await runCli(['serve', '--port', 'abc']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--port / SLUICE_PORT');
    const renamed = await runCli(['serve', '--rollout-lease-ms', '2000']);
    expect(renamed.code).toBe(2);
    expect(renamed.stderr).toContain('--rollout-lease-ms was renamed: use --rollout-leadership-ms');
    const usage = await runCli(['rules', 'diff', 'x', '--server', server.url]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('must be a positive integer');
    // Unknown options and commands, and a required option left out, are usage errors too.
    for (const args of [['serve', '--bogus'], ['nope'], ['rules', 'apply', 'x.yaml', '--server', server.url]]) {
      const r = await runCli(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/unknown option|unknown command|required option '--reason <text>' not specified/);
    }
  });

  it('prints its version, names what each option takes and marks the required ones', async () => {
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    for (const args of [['--version'], ['-V'], ['version']]) {
      const r = await runCli(args);
      expect(r.code).toBe(0);
      expect(r.stdout.trim()).toBe(version);
    }
    const serveHelp = await runCli(['serve', '--help']);
    expect(serveHelp.code).toBe(0);
    for (const flag of [
      '--port <port>',
      '--redis <url>',
      '--store-timeout-ms <ms>',
      '--max-batch <n>',
      '--admin-token <token>',
    ]) {
      expect(serveHelp.stdout).toContain(flag);
    }
    expect(serveHelp.stdout).not.toContain('<value>');
    const applyHelp = await runCli(['rules', 'apply', '--help']);
    expect(applyHelp.stdout).toMatch(/--reason <text>\s+why \(recorded with the version\) \(required\)/);
  });

  it('applies, lists, diffs and rolls back rules on a running server', async () => {
    const env = { SLUICE_ADMIN_TOKEN: TOKEN, SLUICE_SERVER: server.url };
    const file = writeRules(tmp.dir, V2, 'v2.yaml');
    const applied = await runCli(['rules', 'apply', file, '--reason', 'raise api:one', '--author', 'ana'], env);
    expect(applied.code, applied.stderr).toBe(0);
    expect(applied.stdout).toMatch(/^applied v2 {2}\S+ {2}ana {2}raise api:one$/m);
    expect((await call(server.url, '/v1/check', { resource: 'api:one', key: 'cli' })).json.limit).toBe(200);

    const history = await runCli(['rules', 'history'], env);
    expect(
      history.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(' ')[0]),
    ).toEqual(['v2', 'v1']);
    const diff = await runCli(['rules', 'diff', '1', '2'], env);
    expect(diff.stdout).toContain('~ resources api:one: limits[0].limit');
    expect(diff.stdout).toContain('+  api:one: { limits: { algorithm: fixed-window, limit: 200');
    const show = await runCli(['rules', 'show', '--version', '1'], env);
    expect(show.stdout).toContain('limit: 100,');

    const back = await runCli(['rules', 'rollback', '1', '--reason', 'revert'], env);
    expect(back.code).toBe(0);
    expect(back.stdout).toContain('(rollback to v1)');
    expect((await call(server.url, '/v1/check', { resource: 'api:one', key: 'cli2' })).json.limit).toBe(100);

    const stale = await runCli(['rules', 'apply', file, '--reason', 'x', '--expected-version', '1'], env);
    expect(stale.code).toBe(1);
    expect(stale.stderr).toContain('409 SLUICE_ERR_RULE_CONFLICT');
  });

  it('fails clearly without the token, on invalid rules and when the server is unreachable', async () => {
    const file = writeRules(tmp.dir, V2, 'v2b.yaml');
    const denied = await runCli([
      'rules',
      'apply',
      file,
      '--reason',
      'x',
      '--server',
      server.url,
      '--token',
      'wrong-token-0123456789',
    ]);
    expect(denied.code).toBe(1);
    expect(denied.stderr).toContain('401 SLUICE_ERR_UNAUTHORIZED');
    const invalid = writeRules(tmp.dir, 'resources:\n  a: { limits: { algorithm: nope, limit: 1 } }\n', 'invalid.yaml');
    const refused = await runCli(['rules', 'apply', invalid, '--reason', 'x', '--server', server.url, '--token', TOKEN]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('400 SLUICE_ERR_INVALID_RULES: invalid.yaml: resources.a.limits');
    const gone = await runCli(['rules', 'history', '--server', 'http://127.0.0.1:1', '--token', TOKEN]);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain('cannot reach http://127.0.0.1:1');
    expect(server.rules.version?.version).toBe(3);
  });

  it('shows the busiest resources once', async () => {
    await Promise.all(Array.from({ length: 20 }, () => call(server.url, '/v1/check', { resource: 'api:one', key: 'status' })));
    const r = await runCli(['status', '--once', '--interval', '200', '--server', server.url]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).toContain('rules v3');
    expect(lines[1]).toMatch(/^store memory: reachable {2}\| {2}fallback decisions since start: 0/);
    expect(lines[3]).toMatch(/^RESOURCE\s+ALLOWED\/s\s+DENIED\/s\s+SHADOW DENIED\/s/);
    expect(lines.some((l) => /^api:one\s+\d/.test(l))).toBe(true);
  });

  it('refuses to bench without a server to load (it never looks for the repository)', async () => {
    const r = await runCli(['bench']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--server URL and/or --grpc HOST:PORT');
  });

  it('benchmarks a running server over HTTP and gRPC', async () => {
    const r = await runCli([
      'bench',
      '--server',
      server.url,
      '--resource',
      'api:one',
      '--grpc',
      `127.0.0.1:${server.grpcPort}`,
      '--domain',
      'edge',
      '--descriptor',
      'ip=1.2.3.4',
      '--duration',
      '1',
      '--concurrency',
      '4',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^HTTP .* \d+ decisions\/s .*p99 [\d.]+ ms$/m);
    expect(r.stdout).toMatch(/^gRPC .* \d+ decisions\/s .*0 errors\), p50 [\d.]+ ms, p99 [\d.]+ ms$/m);
  });

  it('counts gRPC calls denied, and calls answered with an error or not at all as errors', async () => {
    /** The figures of the gRPC line of a bench's output. */
    const figures = (stdout: string) => {
      const m = /^gRPC .* \((\d+) calls, (\d+) denied, (\d+) errors\)/m.exec(stdout);
      expect(m, stdout).not.toBeNull();
      return { calls: Number(m![1]), denied: Number(m![2]), errors: Number(m![3]) };
    };
    const grpc = ['bench', '--grpc', `127.0.0.1:${server.grpcPort}`, '--domain', 'edge', '--duration', '1', '--concurrency', '4'];
    // 2 a minute: at most 4 allowed, even if the run spans the turn of a minute.
    const limited = await runCli([...grpc, '--descriptor', 'user=bench-denied']);
    expect(limited.code, limited.stderr).toBe(0);
    const l = figures(limited.stdout);
    expect(l.errors).toBe(0);
    expect(l.denied).toBeGreaterThan(0);
    expect(l.calls - l.denied).toBeLessThanOrEqual(4);

    // A value over the server's bound: every call answered INVALID_ARGUMENT.
    const refused = await runCli([...grpc, '--descriptor', `user=${'x'.repeat(100_000)}`]);
    expect(refused.code, refused.stderr).toBe(0);
    expect(figures(refused.stdout)).toMatchObject({ calls: 0, denied: 0 });
    expect(figures(refused.stdout).errors).toBeGreaterThan(0);

    // Nothing listening: every call fails, and the run still ends.
    const gone = await runCli(['bench', '--grpc', '127.0.0.1:1', '--descriptor', 'ip=1', '--duration', '1']);
    expect(gone.code, gone.stderr).toBe(0);
    expect(figures(gone.stdout)).toMatchObject({ calls: 0, denied: 0 });
    expect(figures(gone.stdout).errors).toBeGreaterThan(0);

    const usage = await runCli(['bench', '--grpc', 'localhost', '--descriptor', 'ip=1']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('--grpc "localhost": expected HOST:PORT');
  });

  it('logs JSON lines when stdout is not a terminal, and pretty lines when told to', async () => {
    const piped = await spawnServer(['--rules', writeRules(tmp.dir, V1, 'log.yaml')]);
    expect(await piped.stop()).toBe(0);
    const lines = piped.logs.filter((l) => l.trim() !== '');
    expect(lines.length).toBeGreaterThanOrEqual(2);
    for (const line of lines)
      expect(JSON.parse(line), line).toMatchObject({
        level: expect.stringMatching(/^(trace|debug|info|warn|error|fatal)$/),
        msg: expect.any(String),
      });

    // Forced pretty on a pipe: pino-pretty's lines (no colours, since the pipe is no terminal).
    const args = ['serve', '--host', '127.0.0.1', '--port', '0', '--grpc-port', '0', '--log-format', 'pretty'];
    const child = spawn(process.execPath, [SLUICE_BIN, ...args, '--rules', writeRules(tmp.dir, V1, 'pretty.yaml')], {
      env: { ...childEnv(), SLUICE_ADMIN_TOKEN: TOKEN },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    let out = '';
    await new Promise<void>((resolve, reject) => {
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
        out += chunk;
        if (out.includes('sluice serving')) resolve();
      });
      void exited.then((code) => reject(new Error(`sluice serve exited with ${code}:\n${out}`)));
    });
    // Not asserting the exit code: this is about the log's format.
    child.kill('SIGTERM');
    await exited;
    const serving = out.split('\n').find((l) => l.includes('sluice serving'))!;
    expect(serving).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: sluice serving$/);
    expect(out).not.toContain('\x1b[');
    expect(() => JSON.parse(serving) as unknown).toThrow();

    const bad = await runCli(['serve', '--log-format', 'text']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--log-format / SLUICE_LOG_FORMAT: must be auto, json or pretty');
  });
});
