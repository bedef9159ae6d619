import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Tests import packages by name; point every name a package exports (package.json `exports`)
// at its source, so tests need no build. The packages are the workspaces of the root package.json.
function workspaceAliases(): Record<string, string> {
  const root = new URL('./', import.meta.url);
  const { workspaces } = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as { workspaces: string[] };
  const entries: [string, string][] = [];
  for (const dir of workspaces) {
    const pkg = JSON.parse(readFileSync(new URL(`${dir}/package.json`, root), 'utf8')) as {
      name: string;
      exports?: Record<string, string | { default: string }>;
    };
    for (const [subpath, target] of Object.entries(pkg.exports ?? {})) {
      const built = typeof target === 'string' ? target : target.default;
      const source = built.replace(/^\.\/dist\//, './src/').replace(/\.js$/, '.ts');
      entries.push([`${pkg.name}${subpath.slice(1)}`, fileURLToPath(new URL(`${dir}/${source}`, root))]);
    }
  }
  // Subpaths first: an alias also matches the names it is a prefix of.
  entries.sort((x, y) => y[0].length - x[0].length);
  return Object.fromEntries(entries);
}

const alias = workspaceAliases();

export default defineConfig({
  resolve: { alias },
  test: {
    projects: [
      {
        resolve: { alias },
        test: {
          name: 'unit',
          include: ['packages/*/src/**/*.test.ts', 'bench/src/**/*.test.ts', 'test/unit/**/*.test.ts'],
          // Unit tests run on a manual clock: time is never their subject, so a machine whose
          // cores are busy with other work must not fail them (some parse megabytes of text).
          testTimeout: 30_000,
        },
      },
      {
        resolve: { alias },
        test: {
          name: 'integration',
          include: ['packages/*/test/**/*.test.ts', 'test/integration/**/*.test.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
          // Integration files share real servers; running them one at a time keeps timing sane
          // on small machines.
          fileParallelism: false,
        },
      },
    ],
  },
});
