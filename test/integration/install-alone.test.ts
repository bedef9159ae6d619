/**
 * Every published package, installed alone into an empty project the way a user installs it:
 * published to a throwaway registry on loopback, `npm install <name>` in a fresh CommonJS project
 * (what `npm init -y` writes), then every entry point imported, `require`d and type-checked.
 * npm must warn about nothing but the known install scripts it leaves unrun. The gateway must also
 * come without any broker client, Redis client or rule engine, and work; the server without a gRPC
 * or protobuf library.
 * Each install's footprint is written to `<run dir>/install-footprint.json` (docs/releasing.md).
 * Last, the README's express app is pasted into a fresh project that installs what the README
 * says, run on a throwaway Redis, and asked until it answers 429.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, RedisServer } from '@sluice/redis/testing';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { snippetsIn } from '../doc-snippets.js';
import { command, LocalRegistry } from '../local-registry.js';
// @ts-expect-error: a plain script of the repository, without types.
import { publishedPackages, releaseFields } from '../../scripts/release.mjs';

interface Published {
  dir: string;
  pkg: {
    name: string;
    exports: Record<string, unknown>;
    peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  };
}

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');
const packages = (publishedPackages as (root: string) => Published[])(ROOT);
const { version } = (releaseFields as (root: string) => { version: string })(ROOT);
const footprints: Record<string, { packages: number; megabytes: number }> = {};

/** Bytes under a directory (files only, symlinks not followed). */
function sizeOf(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += sizeOf(path);
    else if (entry.isFile()) total += statSync(path).size;
  }
  return total;
}

function specifiers(p: Published): string[] {
  return Object.keys(p.pkg.exports).map((sub) => (sub === '.' ? p.pkg.name : `${p.pkg.name}${sub.slice(1)}`));
}

/** What @sluice/gateway must not bring: broker clients, Redis, the rule engine, the aggregators. */
const NOT_FOR_THE_GATEWAY = [
  'nats',
  '@grpc/grpc-js',
  '@grpc/proto-loader',
  'ioredis',
  '@marcbachmann/cel-js',
  '@sluice/governance',
  '@sluice/redis',
  '@sluice/rules',
];

/** Every package name right under a node_modules folder, scoped ones as `@scope/name`. */
function installedNames(modules: string): string[] {
  const names: string[] = [];
  for (const entry of readdirSync(modules)) {
    if (entry.startsWith('.')) continue;
    if (entry.startsWith('@')) for (const sub of readdirSync(join(modules, entry))) names.push(`${entry}/${sub}`);
    else names.push(entry);
  }
  return names.sort();
}

// Run inside the gateway's project by plain Node: the gateway loads, blocks a path it was told to
// block and lets another through with an event published; a broker subpath without its client
// fails with the code that says what to install.
const GATEWAY_CHECK = `
import { createServer } from 'node:http';
const { Gateway } = await import('@sluice/gateway');
const { MemoryTransport, decodeEvents, encodeDecisions, hashValue } = await import('@sluice/stream');
const transport = new MemoryTransport({ partitions: 1 });
const gateway = new Gateway({ transport, probe: { flushIntervalMs: 1 } });
await gateway.start();
const events = [];
const sub = await transport.consume(0, 'check', async (batch) => void events.push(...decodeEvents(batch)));
await transport.broadcast(encodeDecisions([{ action: 'block', dimension: 'path', value: hashValue('/hot'),
  ttlMs: 60000, retryAfterMs: 1000, ruleId: 'hot', issuedAtMs: Date.now() }]));
while (gateway.cache.size === 0) await new Promise((r) => setTimeout(r, 5));
const server = createServer(gateway.wrap((req, res) => res.end('ok')));
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const url = 'http://127.0.0.1:' + server.address().port;
const hot = (await fetch(url + '/hot')).status;
const cold = (await fetch(url + '/cold')).status;
while (events.length === 0) await new Promise((r) => setTimeout(r, 5));
let missingPeer;
try { await import('@sluice/stream/nats'); } catch (e) { missingPeer = { code: e.code, message: e.message }; }
server.close();
await sub.stop();
await gateway.close();
await transport.close();
console.log(JSON.stringify({ hot, cold, events: events.length, status: events[0].status, missingPeer }));
`;

/** The gateway, installed alone: no broker client, Redis client or rule engine, and it works without them. */
async function checkGatewayAlone(app: string): Promise<void> {
  const names = installedNames(join(app, 'node_modules'));
  expect(names.filter((n) => NOT_FOR_THE_GATEWAY.includes(n))).toEqual([]);
  // Nothing but @sluice packages: the gateway has no third-party dependency.
  expect(names.filter((n) => !n.startsWith('@sluice/'))).toEqual([]);
  writeFileSync(join(app, 'gateway-check.mjs'), GATEWAY_CHECK);
  const r = await command(process.execPath, ['gateway-check.mjs'], app);
  expect(r.code, r.stderr).toBe(0);
  const result = JSON.parse(r.stdout) as {
    hot: number;
    cold: number;
    events: number;
    status: number;
    missingPeer?: { code: string; message: string };
  };
  expect(result).toMatchObject({ hot: 429, cold: 200, status: 200 });
  expect(result.events).toBeGreaterThan(0);
  expect(result.missingPeer?.code).toBe('SLUICE_ERR_STREAM_MISSING_PEER');
  expect(result.missingPeer?.message).toContain('npm install nats');
}

/**
 * Whether a process of group `pgid` runs (from /proc: a zombie, which nobody reaped yet, does not
 * run; where there is no /proc, whether the group can be signalled).
 */
function groupRuns(pgid: number): boolean {
  let entries: string[];
  try {
    entries = readdirSync('/proc').filter((e) => /^\d+$/.test(e));
  } catch {
    try {
      process.kill(-pgid, 0);
      return true;
    } catch {
      return false;
    }
  }
  for (const pid of entries) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // ended meanwhile
    }
    // Fields after the command name (in parentheses, which may hold spaces): state, ppid, pgrp.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === pgid && state !== 'Z') return true;
  }
  return false;
}

/**
 * The server README's first form, as written but on a free port: `npx sluice serve --rules` with
 * the example rules the package ships, a decision over HTTP, then SIGTERM ends it with 0.
 */
async function checkServerAlone(app: string): Promise<void> {
  const rules = 'node_modules/@sluice/server/examples/rules.yaml';
  expect(existsSync(join(app, rules)), `${rules} ships with the package`).toBe(true);
  const readme = readFileSync(join(app, 'node_modules/@sluice/server/README.md'), 'utf8');
  expect(readme).toContain(`npx sluice serve --rules ${rules}`);
  const port = await freePort();
  // A process group of its own: npx runs sluice serve as its child, and the test must reach both.
  const child = spawn('npx', ['sluice', 'serve', '--rules', rules, '--port', String(port), '--grpc-port', 'off'], {
    cwd: app,
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: true,
  });
  const group = -child.pid!;
  const groupAlive = () => groupRuns(child.pid!);
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  try {
    const deadline = Date.now() + 60_000;
    let answer: Response | undefined;
    while (answer === undefined) {
      expect(child.exitCode, stderr).toBeNull();
      answer = await fetch(`http://127.0.0.1:${port}/v1/check`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ resource: 'api:payment_gateway', key: 'tenant-a' }),
      }).catch(() => undefined);
      if (answer === undefined) {
        expect(Date.now(), 'sluice serve did not listen within 60 s').toBeLessThan(deadline);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    expect(answer.status).toBe(200);
    expect(await answer.json()).toMatchObject({ allowed: true, source: 'store' });
    // SIGTERM to the group, as a terminal's Ctrl-C or a process manager's stop sends it: sluice
    // serve drains and exits, and npx ends too (by the same signal, npm's convention). Nothing of
    // the group may be left running.
    const exited = once(child, 'exit');
    process.kill(group, 'SIGTERM');
    const [exitCode, signal] = (await exited) as [number | null, NodeJS.Signals | null];
    expect(exitCode === 0 || signal === 'SIGTERM', `exit ${exitCode}, signal ${signal}: ${stderr}`).toBe(true);
    const gone = Date.now() + 15_000;
    while (groupAlive() && Date.now() < gone) await new Promise((r) => setTimeout(r, 100));
    expect(groupAlive(), 'sluice serve still runs 15 s after SIGTERM').toBe(false);
  } finally {
    if (groupAlive()) process.kill(group, 'SIGKILL');
  }
}

/**
 * Dependencies with install scripts that npm warns about (npm 11 runs none it was not told to
 * allow), by the published packages they come with. A package's install must warn about exactly
 * these and nothing else, so that an entry is removed once its cause is gone.
 */
const KNOWN_INSTALL_SCRIPTS: Readonly<Record<string, readonly string[]>> = {
  // Through the Temporal SDK.
  protobufjs: ['@sluice/temporal'],
  '@swc/core': ['@sluice/temporal'],
};

/** What @sluice/server must not bring: the gRPC libraries its tests use as an independent client. */
const NOT_FOR_THE_SERVER = ['@grpc/grpc-js', '@grpc/proto-loader', 'protobufjs'];

/**
 * The `npm warn` lines of an npm command's output: the packages named as having install scripts
 * npm did not run, and every other warning line.
 */
function npmWarnings(r: { stdout: string; stderr: string }): { installScripts: string[]; other: string[] } {
  const installScripts: string[] = [];
  const other: string[] = [];
  for (const line of `${r.stderr}\n${r.stdout}`.split('\n')) {
    if (!/^npm warn\b/i.test(line)) continue;
    const script = /^npm warn install-scripts {3}(@?[^@\s]+)@\S+ \(/.exec(line);
    if (script !== null) installScripts.push(script[1]!);
    // The block around the list: its count, a blank line, how to review.
    else if (!/^npm warn install-scripts( \d+ packages? ha(s|ve) install scripts|$| Run `npm install-scripts)/.test(line)) {
      other.push(line);
    }
  }
  return { installScripts: installScripts.sort(), other };
}

let registry: LocalRegistry;
let work: string;

beforeAll(async () => {
  for (const { dir } of packages) {
    if (!existsSync(join(ROOT, dir, 'dist'))) throw new Error(`${dir}/dist is missing: run \`npm run build\` first`);
  }
  registry = await LocalRegistry.start();
  work = mkdtempSync(join(tmpdir(), 'sluice-install-'));
  for (const { dir, pkg } of packages) {
    const r = await registry.npm(['publish'], join(ROOT, dir));
    if (r.code !== 0) throw new Error(`npm publish ${pkg.name} failed:\n${r.stderr}`);
  }
}, 300_000);

afterAll(async () => {
  await registry?.close();
  if (work !== undefined) rmSync(work, { recursive: true, force: true });
  const runDir = process.env['SLUICE_RUN_DIR'] ?? join(ROOT, '.run');
  mkdirSync(runDir, { recursive: true });
  writeFileSync(join(runDir, 'install-footprint.json'), `${JSON.stringify(footprints, null, 2)}\n`);
});

describe.each(packages)('$pkg.name installed alone', (p) => {
  it('installs from the registry, and every entry point imports, requires and type-checks', async () => {
    const app = join(work, p.pkg.name.replace('/', '-'));
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'commonjs' }));

    const installed = await registry.npm(['install', `${p.pkg.name}@${version}`], app);
    expect(installed.code, installed.stderr).toBe(0);
    // Nothing installed needs a newer Node than the packages promise.
    expect(installed.stderr).not.toContain('EBADENGINE');
    // Nor anything else a user would have to look into (deprecated packages, peers that do not
    // fit), and no install scripts awaiting approval but the known ones.
    const warnings = npmWarnings(installed);
    expect(warnings.other, `npm install ${p.pkg.name}`).toEqual([]);
    const known = Object.keys(KNOWN_INSTALL_SCRIPTS).filter((dep) => KNOWN_INSTALL_SCRIPTS[dep]!.includes(p.pkg.name));
    expect(warnings.installScripts, `npm install ${p.pkg.name}: install scripts`).toEqual(known.sort());

    const optionalPeers = Object.entries(p.pkg.peerDependenciesMeta ?? {})
      .filter(([, meta]) => meta.optional === true)
      .map(([name]) => name);
    const typed: string[] = [];
    for (const spec of specifiers(p)) {
      const imported = await command(
        process.execPath,
        ['--input-type=module', '-e', `await import(${JSON.stringify(spec)})`],
        app,
      );
      if (imported.code !== 0) {
        // An entry point over an optional peer fails without it, and must say which to install.
        const missing = optionalPeers.find(
          (peer) => imported.stderr.includes(peer) && !existsSync(join(app, 'node_modules', peer)),
        );
        expect(missing, `import ${spec}:\n${imported.stderr}`).toBeDefined();
        continue;
      }
      typed.push(spec);
      const required = await command(process.execPath, ['-e', `require(${JSON.stringify(spec)})`], app);
      expect(required.code, `require ${spec}:\n${required.stderr}`).toBe(0);
    }
    expect(typed).toContain(p.pkg.name);

    writeFileSync(
      join(app, 'check.mts'),
      `${typed.map((s, i) => `import * as m${i} from ${JSON.stringify(s)};`).join('\n')}\nexport const all = [${typed.map((_, i) => `m${i}`).join(', ')}];\n`,
    );
    const tsc = await command(
      process.execPath,
      [
        TSC,
        '--noEmit',
        '--strict',
        '--module',
        'nodenext',
        '--moduleResolution',
        'nodenext',
        '--target',
        'es2022',
        '--skipLibCheck',
        '--types',
        'node',
        '--typeRoots',
        join(ROOT, 'node_modules/@types'),
        'check.mts',
      ],
      app,
    );
    expect(tsc.code, `tsc:\n${tsc.stdout}${tsc.stderr}`).toBe(0);

    if (p.pkg.name === '@sluice/gateway') await checkGatewayAlone(app);
    if (p.pkg.name === '@sluice/server') await checkServerAlone(app);

    const listed = (await command('npm', ['ls', '--all', '--parseable'], app)).stdout.split('\n');
    if (p.pkg.name === '@sluice/server') {
      expect(NOT_FOR_THE_SERVER.filter((name) => listed.some((l) => l.endsWith(`/node_modules/${name}`)))).toEqual([]);
    }
    footprints[p.pkg.name] = {
      packages: listed.filter((l) => l.includes('node_modules')).length,
      megabytes: Math.round(sizeOf(join(app, 'node_modules')) / 1e5) / 10,
    };
  }, 600_000);
});

/** The README's ```ts block that imports express (its limited express app), as JavaScript. */
function readmeExpressApp(): string {
  const block = snippetsIn(ROOT, 'README.md').find((s) => s.code.includes("from 'express'"));
  if (block === undefined) throw new Error('README.md has no ```ts block importing express');
  return ts.transpileModule(block.code, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } })
    .outputText;
}

describe("the README's express app, in a fresh project", () => {
  it('installs what the README says, limits per client through Redis and exits on SIGTERM', async () => {
    const install = /`npm install (express @sluice\/core @sluice\/redis @sluice\/gateway)`/.exec(
      readFileSync(join(ROOT, 'README.md'), 'utf8'),
    );
    expect(install, 'README.md says which packages the express app needs').not.toBeNull();
    const app = join(work, 'readme-express');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'commonjs' }));
    const names = install![1]!.split(' ').map((n) => (n.startsWith('@sluice/') ? `${n}@${version}` : n));
    const installed = await registry.npm(['install', ...names], app);
    expect(installed.code, installed.stderr).toBe(0);

    const redis = await RedisServer.start();
    const port = await freePort();
    const code = readmeExpressApp()
      .replace('redis://localhost:6379', redis.url)
      .replace('app.listen(3000)', `app.listen(${port})`);
    expect(code).toContain(redis.url);
    expect(code).toContain(`app.listen(${port})`);
    writeFileSync(join(app, 'app.mjs'), code);
    const child = spawn(process.execPath, ['app.mjs'], { cwd: app, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    try {
      const url = `http://127.0.0.1:${port}/`;
      const deadline = Date.now() + 60_000;
      let first: Response | undefined;
      while (first === undefined) {
        expect(child.exitCode, stderr).toBeNull();
        first = await fetch(url).catch(() => undefined);
        if (first === undefined) {
          expect(Date.now(), 'the app did not listen within 60 s').toBeLessThan(deadline);
          await new Promise((r) => setTimeout(r, 200));
        }
      }
      // The IETF fields the README names: the policy's quota, and what remains of it.
      expect(first.headers.get('ratelimit-policy')).toBe('"api";q=100');
      expect(first.headers.get('ratelimit')).toMatch(/^"api";r=99;t=\d+$/);
      const statuses = [first.status];
      for (let i = 0; i < 100; i++) statuses.push((await fetch(url)).status);
      // limit: 100 per minute per client address.
      expect(statuses.slice(0, 100).every((s) => s === 200)).toBe(true);
      const denied = await fetch(url);
      expect(statuses[100]).toBe(429);
      expect(denied.status).toBe(429);
      expect(Number(denied.headers.get('retry-after'))).toBeGreaterThan(0);

      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      const [exitCode] = (await exited) as [number | null];
      expect(exitCode, stderr).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await redis.stop();
    }
  }, 600_000);
});
