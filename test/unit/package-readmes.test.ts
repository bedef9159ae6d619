import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/** Every workspace of the root package.json (the one list of packages) has a README that says what it is and how it is entered. */
const root = join(dirname(fileURLToPath(import.meta.url)), '../..');
const { workspaces } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { workspaces: string[] };

interface Manifest {
  name: string;
  exports?: Record<string, unknown>;
}

/** `@sluice/core` for `.`, `@sluice/core/metrics` for `./metrics`. */
function importName(name: string, subpath: string): string {
  return subpath === '.' ? name : `${name}${subpath.slice(1)}`;
}

/** True if the text names the import exactly: `@sluice/core` is not named by `@sluice/core/metrics` alone. */
function namesImport(text: string, spec: string): boolean {
  const escaped = spec.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  return new RegExp(`${escaped}(?![\\w/-])`).test(text);
}

/** The relative link targets of a Markdown text (not URLs, not in-page anchors), without their anchors. */
function relativeLinks(text: string): string[] {
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((m) => m[1]!)
    .filter((href) => !/^[a-z][a-z+.-]*:/i.test(href) && !href.startsWith('#'))
    .map((href) => href.split('#')[0]!);
}

describe('the README checks', () => {
  it('tell an import from a longer one it begins', () => {
    expect(namesImport('use `@sluice/core/metrics`', '@sluice/core')).toBe(false);
    expect(namesImport('use `@sluice/core/metrics` or `@sluice/core`', '@sluice/core')).toBe(true);
    expect(namesImport('@sluice/core-extra', '@sluice/core')).toBe(false);
    expect(importName('@sluice/redis', './kit')).toBe('@sluice/redis/kit');
  });

  it('find relative links only', () => {
    expect(relativeLinks('[a](../x.md#y) [b](https://e.org) [c](#here) [d](./y.md)')).toEqual(['../x.md', './y.md']);
  });
});

describe('package READMEs', () => {
  for (const dir of workspaces) {
    const manifest = JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8')) as Manifest;
    const readme = join(root, dir, 'README.md');

    describe(manifest.name, () => {
      it('has a README.md titled with the package name', () => {
        expect(existsSync(readme), `${dir}/README.md is missing`).toBe(true);
        expect(readFileSync(readme, 'utf8').split('\n')[0]).toBe(`# ${manifest.name}`);
      });

      it('names every entry point of its exports', () => {
        const text = existsSync(readme) ? readFileSync(readme, 'utf8') : '';
        const missing = Object.keys(manifest.exports ?? {})
          .map((subpath) => importName(manifest.name, subpath))
          .filter((spec) => !namesImport(text, spec));
        expect(missing, `${dir}/README.md does not name these entry points`).toEqual([]);
      });

      it('links only to files that exist', () => {
        const text = existsSync(readme) ? readFileSync(readme, 'utf8') : '';
        const broken = relativeLinks(text).filter((href) => !existsSync(join(root, dir, href)));
        expect(broken, `${dir}/README.md links to missing files`).toEqual([]);
      });
    });
  }
});
