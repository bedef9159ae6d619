/**
 * The TypeScript blocks of the docs, as a user pastes them: every ```ts block of README.md,
 * docs/ and the package and example READMEs. A block fenced ```ts run is meant to run as it is;
 * one fenced ```ts fragment is a piece of a larger program shown for its shape (not listed).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface DocSnippet {
  /** Where it is, as `docs/gateway.md:120`. */
  readonly at: string;
  readonly code: string;
  readonly run: boolean;
}

/** The Markdown files whose code users paste, relative to `root`. */
export function markdownFiles(root: string): string[] {
  const inDir = (dir: string) =>
    readdirSync(join(root, dir))
      .filter((f) => f.endsWith('.md'))
      .map((f) => join(dir, f));
  const readmes = (dir: string) =>
    readdirSync(join(root, dir), { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => join(dir, d.name, 'README.md'))
      .filter((f) => existsSync(join(root, f)));
  return ['README.md', ...inDir('docs'), ...readmes('packages'), ...readmes('examples')];
}

/** The ```ts blocks of one Markdown file (`path` names it in {@link DocSnippet.at}). */
export function snippetsOf(path: string, text: string): DocSnippet[] {
  const out: DocSnippet[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(ts|typescript)(\s+run)?\s*$/.exec(lines[i]!);
    if (open === null) continue;
    const start = i + 1;
    while (i + 1 < lines.length && !lines[i + 1]!.startsWith('```')) i++;
    out.push({ at: `${path}:${start}`, code: lines.slice(start, i + 1).join('\n'), run: open[2] !== undefined });
    i++;
  }
  return out;
}

/** The blocks of `path` (relative to `root`). */
export function snippetsIn(root: string, path: string): DocSnippet[] {
  return snippetsOf(path, readFileSync(join(root, path), 'utf8'));
}
