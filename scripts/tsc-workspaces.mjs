// Runs TypeScript over every workspace listed in package.json, the one list of packages:
//   node scripts/tsc-workspaces.mjs build      tsc -b of each workspace's build project
//   node scripts/tsc-workspaces.mjs typecheck  tsc -p of each workspace (sources and tests), then of the root
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { workspaces } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const mode = process.argv[2];
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const run = (args) => {
  const r = spawnSync(process.execPath, [tsc, ...args], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
};

if (mode === 'build') {
  // Each workspace's build project (tsconfig.build.json, else tsconfig.json); tsc -b orders them
  // by their references.
  run(['-b', ...workspaces.map((w) => (existsSync(join(root, w, 'tsconfig.build.json')) ? `${w}/tsconfig.build.json` : w))]);
} else if (mode === 'typecheck') {
  for (const w of workspaces) {
    const buildOnly = !existsSync(join(root, w, 'tsconfig.build.json'));
    // A workspace with one project (the bench) is checked without writing its output.
    run(['-p', w, ...(buildOnly ? ['--noEmit'] : [])]);
  }
  run(['-p', '.']);
} else {
  console.error('usage: node scripts/tsc-workspaces.mjs build|typecheck');
  process.exit(2);
}
