/**
 * The docs' TypeScript works when pasted: every ```ts block of README.md, docs/ and the package
 * and example READMEs is compiled as a module of its own against the built packages (tsc
 * --strict, nodenext), and blocks fenced ```ts run are run too (with Redis at the test servers'
 * address in place of redis://localhost:6379). A block fenced ```ts fragment is a piece of a larger
 * program shown for its shape, and is not compiled. `npm run build` first.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { markdownFiles, snippetsIn, type DocSnippet } from '../doc-snippets.js';
import { command } from '../local-registry.js';
import { redisUrl } from '../env.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');
// Inside the repository, so the snippets resolve @sluice/* as an installed user's code does.
const DIR = join(ROOT, '.run', 'snippets');

interface Snippet extends DocSnippet {
  /** Its module in the scratch directory. */
  readonly file: string;
}

const snippets: Snippet[] = markdownFiles(ROOT).flatMap((path, n) =>
  snippetsIn(ROOT, path).map((s, k) => ({ ...s, file: `s${n}_${k}.mts` })),
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
