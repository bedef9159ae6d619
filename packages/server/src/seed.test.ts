import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileRuleStore } from '@sluice/rules';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { followRuleFiles, seedRuleStore, watchRuleFiles } from './seed.js';

const dir = mkdtempSync(join(tmpdir(), 'sluice-seed-'));
const stores: FileRuleStore[] = [];
afterAll(async () => {
  await Promise.all(stores.map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
});

const logged: { level: number; msg: string }[] = [];
const logger = pino({ level: 'info' }, { write: (l: string) => logged.push(JSON.parse(l) as { level: number; msg: string }) });
const rules = (limit: number) =>
  `resources:\n  api:x:\n    limits: { algorithm: fixed-window, limit: ${limit}, windowMs: 1000 }\n`;
let n = 0;
function setUp(): { file: string; store: () => FileRuleStore } {
  const sub = join(dir, `case-${n++}`);
  const file = join(dir, `rules-${n}.yaml`);
  writeFileSync(file, rules(10));
  return {
    file,
    store: () => {
      const s = new FileRuleStore({ dir: sub });
      stores.push(s);
      return s;
    },
  };
}

describe('rule files as the source of truth (--rules-mode files)', () => {
  it('makes a new version only when the content differs, naming the files and the hash', async () => {
    const { file, store } = setUp();
    const s = store();
    expect(await followRuleFiles(s, [file], logger)).toMatchObject({ outcome: 'applied', version: 1 });
    expect(await followRuleFiles(s, [file], logger)).toMatchObject({ outcome: 'unchanged', version: 1 });
    // Formatting alone is not a change: the compiled content is compared.
    writeFileSync(file, `# a comment\n${rules(10)}`);
    expect(await followRuleFiles(s, [file], logger)).toMatchObject({ outcome: 'unchanged', version: 1 });
    writeFileSync(file, rules(20));
    expect(await followRuleFiles(s, [file], logger)).toMatchObject({ outcome: 'applied', version: 2 });
    const [latest] = await s.history();
    expect(latest!.author).toMatch(/^rule files: rules-\d+\.yaml$/);
    expect(latest!.reason).toContain(latest!.hash.slice(0, 16));
    expect((await s.diff(1, 2)).text).toContain('limit: 20');
  });

  it('leaves an admin change alone while the files hold what was last followed', async () => {
    const { file, store } = setUp();
    const s = store();
    const first = await followRuleFiles(s, [file], logger);
    await s.apply(rules(99), { author: 'ops', reason: 'by hand' });
    // The same content seen again (a write noticed twice): the admin change stands.
    expect(await followRuleFiles(s, [file], logger, first.hash)).toEqual({ outcome: 'same-files', hash: first.hash });
    expect((await s.current())!.version).toBe(2);
    // New content wins.
    writeFileSync(file, rules(30));
    expect(await followRuleFiles(s, [file], logger, first.hash)).toMatchObject({ outcome: 'applied', version: 3 });
  });

  it('wins over a change made through the admin API, keeping it in the history', async () => {
    const { file, store } = setUp();
    const s = store();
    await followRuleFiles(s, [file], logger);
    await s.apply(rules(99), { author: 'ops', reason: 'by hand' });
    expect(await followRuleFiles(s, [file], logger)).toMatchObject({ outcome: 'applied', version: 3 });
    expect((await s.current())!.ruleSet.resources['api:x']).toBeDefined();
    expect((await s.history()).map((v) => v.author)).toEqual([
      expect.stringMatching(/^rule files/),
      'ops',
      expect.stringMatching(/^rule files/),
    ]);
  });

  it('lets servers sharing a store and the same files converge on one version', async () => {
    const { file, store } = setUp();
    const fleet = [store(), store(), store(), store()];
    const results = await Promise.all(fleet.map((s) => followRuleFiles(s, [file], logger)));
    expect(results.filter((r) => r.outcome === 'applied')).toHaveLength(1);
    expect(new Set(results.map((r) => ('version' in r ? r.version : undefined)))).toEqual(new Set([1]));
    expect(await fleet[0]!.history()).toHaveLength(1);
  });

  it('refuses invalid files and changes nothing', async () => {
    const { file, store } = setUp();
    const s = store();
    await followRuleFiles(s, [file], logger);
    writeFileSync(file, 'resources:\n  api:x:\n    limits: { algorithm: nope }\n');
    await expect(followRuleFiles(s, [file], logger)).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_RULES' });
    expect((await s.current())!.version).toBe(1);
  });

  it('in seed mode, warns that differing files are ignored', async () => {
    const { file, store } = setUp();
    const s = store();
    await seedRuleStore(s, [file], logger);
    writeFileSync(file, rules(30));
    logged.length = 0;
    await seedRuleStore(s, [file], logger);
    expect(logged).toEqual([expect.objectContaining({ level: 40, msg: expect.stringContaining('ignored') })]);
    expect((await s.current())!.version).toBe(1);
  });

  it('sees a file change on disk', async () => {
    const { file } = setUp();
    let changes = 0;
    const stop = watchRuleFiles([file], () => changes++, 20);
    try {
      await new Promise((r) => setTimeout(r, 100));
      writeFileSync(file, rules(40));
      const deadline = Date.now() + 10_000;
      while (changes === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(changes).toBeGreaterThanOrEqual(1);
    } finally {
      stop();
    }
  });
});
