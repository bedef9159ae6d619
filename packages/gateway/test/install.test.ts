/**
 * What a user who installs @sluice/gateway gets: the packed packages (`npm pack`, as they would
 * be published) of the gateway and of every @sluice package it depends on, installed into an
 * empty project. No broker client, no Redis client, no rule engine may be installed, and the
 * gateway must load and answer requests without them. `npm pack` packs `dist`: run
 * `npm run build` first (scripts/test-all.sh does).
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../../', import.meta.url));

/** What the gateway must not bring: broker clients, Redis, the rule engine, the aggregators. */
const FORBIDDEN = [
  'nats',
  'rocketmq-client-nodejs',
  'ioredis',
  '@marcbachmann/cel-js',
  '@sluice/governance',
  '@sluice/redis',
  '@sluice/rules',
];

interface Manifest {
  name: string;
  dependencies?: Record<string, string>;
}

/** Workspace packages by name (the root package.json's workspaces). */
function workspaces(): Map<string, { dir: string; manifest: Manifest }> {
  const { workspaces } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { workspaces: string[] };
  const byName = new Map<string, { dir: string; manifest: Manifest }>();
  for (const w of workspaces) {
    const dir = join(root, w);
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;
    byName.set(manifest.name, { dir, manifest });
  }
  return byName;
}

/** `name` and the @sluice packages it depends on, transitively (dependencies only: what npm installs). */
function closure(name: string, all: ReturnType<typeof workspaces>): string[] {
  const seen = new Set<string>();
  const visit = (n: string) => {
    if (seen.has(n)) return;
    seen.add(n);
    for (const dep of Object.keys(all.get(n)?.manifest.dependencies ?? {})) if (all.has(dep)) visit(dep);
  };
  visit(name);
  return [...seen];
}

/** npm's environment without the settings of an `npm run` or workspace the tests may run under. */
function npmEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    const key = k.toLowerCase();
    if (key.startsWith('npm_') && key !== 'npm_config_cache' && key !== 'npm_config_registry' && key !== 'npm_config_userconfig')
      continue;
    env[k] = v;
  }
  return env;
}

/** Every package name under a node_modules folder, scoped ones as `@scope/name`. */
function installed(modules: string): string[] {
  const names: string[] = [];
  for (const entry of readdirSync(modules)) {
    if (entry.startsWith('.')) continue;
    if (entry.startsWith('@')) for (const sub of readdirSync(join(modules, entry))) names.push(`${entry}/${sub}`);
    else names.push(entry);
  }
  return names.sort();
}

// The check run inside the installed project, by plain Node (no vitest, no aliases): the gateway
// loads, blocks a path it was told to block and lets another through with an event published;
// a broker subpath without its client fails with the code that says what to install.
const CHECK = `
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

describe('installing @sluice/gateway from its packed package', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-install-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it(
    'installs no broker client, Redis client or rule engine, and the gateway works without them',
    async () => {
      const all = workspaces();
      const packages = closure('@sluice/gateway', all);
      for (const name of packages) {
        const built = join(all.get(name)!.dir, 'dist', 'index.js');
        if (!existsSync(built)) throw new Error(`${name} is not built (${built} is missing): run npm run build first`);
      }
      const tarballs: string[] = [];
      for (const name of packages) {
        const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', dir], {
          cwd: all.get(name)!.dir,
          env: npmEnv(),
        });
        const [packed] = JSON.parse(stdout) as { filename: string }[];
        tarballs.push(join(dir, packed!.filename));
      }
      const project = join(dir, 'app');
      rmSync(project, { recursive: true, force: true });
      await run('mkdir', ['-p', project]);
      writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
      await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', ...tarballs], {
        cwd: project,
        env: npmEnv(),
        maxBuffer: 16 * 1024 * 1024,
      });

      const names = installed(join(project, 'node_modules'));
      expect(names).toEqual(expect.arrayContaining(packages));
      expect(names.filter((n) => FORBIDDEN.includes(n))).toEqual([]);
      // Nothing but the @sluice packages themselves: the gateway has no third-party dependency.
      expect(names.filter((n) => !n.startsWith('@sluice/'))).toEqual([]);

      writeFileSync(join(project, 'check.mjs'), CHECK);
      const { stdout } = await run(process.execPath, ['check.mjs'], { cwd: project });
      const result = JSON.parse(stdout) as {
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
    },
    // Packing and installing are slow on a busy machine; nothing here is timed.
    600_000,
  );
});
