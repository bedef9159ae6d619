/**
 * Every published package, installed alone into an empty project the way a user installs it:
 * published to a throwaway registry on loopback, `npm install <name>` in a fresh CommonJS project
 * (what `npm init -y` writes), then every entry point imported, `require`d and type-checked.
 * Each install's footprint is written to `<run dir>/install-footprint.json` (docs/releasing.md).
 */
import { existsSync, mkdtempSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

    const listed = await command('npm', ['ls', '--all', '--parseable'], app);
    footprints[p.pkg.name] = {
      packages: listed.stdout.split('\n').filter((l) => l.includes('node_modules')).length,
      megabytes: Math.round(sizeOf(join(app, 'node_modules')) / 1e5) / 10,
    };
  }, 600_000);
});
