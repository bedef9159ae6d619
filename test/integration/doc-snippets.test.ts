/**
 * The docs' TypeScript works when pasted: every ```ts block of README.md, docs/ and the package
 * and example READMEs is compiled as a module of its own against the built packages (tsc
 * --strict, nodenext), and blocks fenced ```ts run are run too (with Redis at the test servers'
 * address in place of redis://localhost:6379). A block fenced ```ts fragment is a piece of a larger
 * program shown for its shape, and is not compiled. `npm run build` first.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { command } from '../local-registry.js';
import { redisUrl } from '../env.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');
// Inside the repository, so the snippets resolve @sluice/* as an installed user's code does.
const DIR = join(ROOT, '.run', 'snippets');

interface Snippet {
  /** Where it is, as `docs/gateway.md:120`. */
  readonly at: string;
  readonly code: string;
  readonly run: boolean;
  readonly file: string;
}

function markdownFiles(): string[] {
  const inDir = (dir: string) =>
    readdirSync(join(ROOT, dir))
      .filter((f) => f.endsWith('.md'))
      .map((f) => join(dir, f));
  const readmes = (dir: string) =>
    readdirSync(join(ROOT, dir), { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => join(dir, d.name, 'README.md'))
      .filter((f) => {
        try {
          return readFileSync(join(ROOT, f)).length > 0;
        } catch {
          return false;
        }
      });
  return ['README.md', ...inDir('docs'), ...readmes('packages'), ...readmes('examples')];
}

/** The ```ts blocks of one Markdown file. */
export function snippetsOf(path: string, text: string): Omit<Snippet, 'file'>[] {
  const out: Omit<Snippet, 'file'>[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    // ```ts fragment marks a piece of a larger program, shown for its shape: not compiled.
    const open = /^```(ts|typescript)(\s+run)?\s*$/.exec(lines[i]!);
    if (open === null) continue;
    const start = i + 1;
    while (i + 1 < lines.length && !lines[i + 1]!.startsWith('```')) i++;
    out.push({ at: `${path}:${start}`, code: lines.slice(start, i + 1).join('\n'), run: open[2] !== undefined });
    i++;
  }
  return out;
}

const snippets: Snippet[] = markdownFiles().flatMap((path, n) =>
  snippetsOf(path, readFileSync(join(ROOT, path), 'utf8')).map((s, k) => ({ ...s, file: `s${n}_${k}.mts` })),
);

afterAll(() => rmSync(DIR, { recursive: true, force: true }));

describe('docs snippets', () => {
  it('every TypeScript block compiles against the built packages', async () => {
    expect(snippets.length).toBeGreaterThan(10);
    rmSync(DIR, { recursive: true, force: true });
    mkdirSync(DIR, { recursive: true });
    for (const s of snippets) writeFileSync(join(DIR, s.file), `${s.code}\nexport {};\n`);
    writeFileSync(
      join(DIR, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          lib: ['es2023', 'dom'],
          outDir: 'out',
          skipLibCheck: true,
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules/@types')],
        },
        files: snippets.map((s) => s.file),
      }),
    );
    const tsc = await command(process.execPath, [TSC, '-p', 'tsconfig.json', '--pretty', 'false'], DIR);
    // file.mts(line,col): error TS...: a snippet's line is its block's line plus the file's.
    const errors = tsc.stdout
      .split('\n')
      .filter((l) => l.includes('error TS'))
      .map((l) => {
        const m = /^(s\d+_\d+\.mts)\((\d+),\d+\): (.*)$/.exec(l);
        const s = m === null ? undefined : snippets.find((x) => x.file === m[1]);
        if (m === null || s === undefined) return l;
        const [path, line] = s.at.split(':');
        return `${path}:${Number(line) + Number(m[2]) - 1}: ${m[3]}`;
      });
    expect(errors, `snippets that do not compile:\n${errors.join('\n')}`).toEqual([]);
    expect(tsc.code).toBe(0);
  }, 300_000);

  it.each(snippets.filter((s) => s.run).map((s) => [s.at, s] as const))(
    '%s runs to its end',
    async (_at, s) => {
      const js = join(DIR, 'out', s.file.replace(/\.mts$/, '.mjs'));
      const code = readFileSync(js, 'utf8').replaceAll('redis://localhost:6379', redisUrl());
      writeFileSync(js, code);
      const r = await command(process.execPath, [relative(DIR, js)], DIR);
      expect(r.code, `${s.at} exited ${r.code}:\n${r.stderr}`).toBe(0);
    },
    120_000,
  );
});
