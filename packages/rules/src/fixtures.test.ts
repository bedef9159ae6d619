import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { RulesError, compileRules } from './index.js';

const dir = fileURLToPath(new URL('../test/fixtures/invalid/', import.meta.url));
const EXPECT = '# expect: ';

/** The messages a fixture declares in its leading `# expect: ` lines, one per issue. */
function expected(text: string): string {
  const lines: string[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith(EXPECT)) break;
    lines.push(line.slice(EXPECT.length));
  }
  return lines.join('\n');
}

function failure(run: () => unknown): RulesError {
  try {
    run();
  } catch (e) {
    if (e instanceof RulesError) return e;
    throw e;
  }
  throw new Error('expected the rules to be rejected');
}

describe('invalid rule files', () => {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort();

  it('has a fixture per case', () => {
    expect(files.length).toBeGreaterThanOrEqual(14);
  });

  it.each(files)('%s is rejected with its exact message', (name) => {
    const text = readFileSync(join(dir, name), 'utf8');
    const want = expected(text);
    expect(want).not.toBe('');
    const err = failure(() => compileRules(text, { file: name }));
    expect(err.code).toBe('SLUICE_ERR_INVALID_RULES');
    expect(err.message).toBe(want);
    expect(err.file).toBe(name);
    expect(err.issues.length).toBe(want.split('\n').length);
  });
});
