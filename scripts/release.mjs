#!/usr/bin/env node
// Keeps the published packages in step. The root package.json is the one place that says the
// release's version, the Node versions supported, the licence and the repository; every
// workspace that is not private gets them, and its @sluice/* dependencies are pinned to that
// exact version (the Lua protocol ties @sluice/redis to @sluice/core, so mixed versions are
// never installed together).
//
//   node scripts/release.mjs check            fail (exit 1) listing what is out of step
//   node scripts/release.mjs sync             write the root's fields into every package
//   node scripts/release.mjs version 0.2.0    set the release's version, then sync
//   node scripts/release.mjs license          copy LICENSE into the current package (prepack)
//   node scripts/release.mjs unlicense        remove that copy again (postpack)
import { copyFileSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SEMVER = /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/;
const DEPENDENCY_FIELDS = ['dependencies', 'peerDependencies', 'optionalDependencies', 'devDependencies'];
// Sources ship beside dist so the source maps (and declaration maps) resolve.
const SOURCE_FILES = ['src', '!src/**/*.test.ts'];
const SCRIPTS = {
  prepack: 'node ../../scripts/release.mjs license',
  postpack: 'node ../../scripts/release.mjs unlicense',
};

const readJson = (file) => JSON.parse(readFileSync(file, 'utf8'));
const writeJson = (file, value) => writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`);

/** The workspaces that are published, in the root's order: `{ dir, file, pkg }`. */
export function publishedPackages(root = ROOT) {
  const { workspaces } = readJson(join(root, 'package.json'));
  return workspaces
    .map((dir) => ({ dir, file: join(root, dir, 'package.json') }))
    .map((w) => ({ ...w, pkg: readJson(w.file) }))
    .filter((w) => w.pkg.private !== true);
}

/** What the root says every published package carries. */
export function releaseFields(root = ROOT) {
  const pkg = readJson(join(root, 'package.json'));
  for (const field of ['version', 'license', 'engines', 'repository']) {
    if (pkg[field] === undefined) throw new Error(`package.json: the root must set "${field}"`);
  }
  return { version: pkg.version, license: pkg.license, engines: pkg.engines, repository: pkg.repository };
}

/** The package as it should be: the root's fields, pinned siblings, sources shipped. */
export function synced(pkg, dir, fields, names) {
  const next = { ...pkg, version: fields.version, license: fields.license, engines: fields.engines };
  next.repository = { ...fields.repository, directory: dir };
  for (const field of DEPENDENCY_FIELDS) {
    if (next[field] === undefined) continue;
    next[field] = Object.fromEntries(
      Object.entries(next[field]).map(([name, range]) => [name, names.has(name) ? fields.version : range]),
    );
  }
  const files = next.files ?? [];
  next.files = [...files.filter((f) => !SOURCE_FILES.includes(f)), ...SOURCE_FILES];
  next.scripts = { ...next.scripts, ...SCRIPTS };
  return next;
}

/** Every way the published packages are out of step, as lines for a person. */
export function problems(root = ROOT) {
  const fields = releaseFields(root);
  const out = [];
  if (!SEMVER.test(fields.version)) out.push(`package.json: version ${fields.version} is not x.y.z`);
  if (!existsSync(join(root, 'LICENSE'))) out.push('LICENSE: missing at the root');
  const packages = publishedPackages(root);
  const names = new Set(packages.map((p) => p.pkg.name));
  for (const { dir, pkg } of packages) {
    const want = synced(pkg, dir, fields, names);
    for (const key of Object.keys(want)) {
      if (JSON.stringify(want[key]) !== JSON.stringify(pkg[key])) {
        out.push(`${dir}/package.json: "${key}" is ${JSON.stringify(pkg[key])}, want ${JSON.stringify(want[key])}`);
      }
    }
    if (pkg.type !== 'module') out.push(`${dir}/package.json: "type" must be "module"`);
    if (pkg.exports === undefined) out.push(`${dir}/package.json: no "exports"`);
    if (!existsSync(join(root, dir, 'README.md'))) out.push(`${dir}: no README.md`);
  }
  return out;
}

function sync(root = ROOT) {
  const fields = releaseFields(root);
  const packages = publishedPackages(root);
  const names = new Set(packages.map((p) => p.pkg.name));
  for (const { dir, file, pkg } of packages) writeJson(file, synced(pkg, dir, fields, names));
}

function main([command, arg]) {
  switch (command) {
    case 'check': {
      const found = problems();
      for (const line of found) console.error(line);
      if (found.length > 0) {
        console.error(`\n${found.length} problem(s); \`node scripts/release.mjs sync\` fixes the package fields.`);
        process.exit(1);
      }
      return;
    }
    case 'sync':
      return sync();
    case 'version': {
      if (arg === undefined || !SEMVER.test(arg)) throw new Error('usage: release.mjs version <x.y.z>');
      const file = join(ROOT, 'package.json');
      writeJson(file, { ...readJson(file), version: arg });
      return sync();
    }
    case 'license':
      return copyFileSync(join(ROOT, 'LICENSE'), join(process.cwd(), 'LICENSE'));
    case 'unlicense':
      // Only a copy made by `license` (never the root's own file).
      if (relative(ROOT, process.cwd()) !== '') rmSync(join(process.cwd(), 'LICENSE'), { force: true });
      return;
    default:
      throw new Error('usage: release.mjs check | sync | version <x.y.z> | license | unlicense');
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
