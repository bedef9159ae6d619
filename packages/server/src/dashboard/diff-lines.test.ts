import { unifiedDiff } from '@sluice/rules';
import { describe, expect, it } from 'vitest';
import { classifyDiffLines } from './diff-lines.js';

describe('classifyDiffLines', () => {
  it('classifies the lines of a unified diff of two rule texts', () => {
    const before = 'resources:\n  a: { limits: { limit: 3 } }\n  b: {}\n';
    const after = 'resources:\n  a: { limits: { limit: 10 } }\n  b: {}\n';
    const lines = classifyDiffLines(unifiedDiff(before, after, { fromLabel: 'v1', toLabel: 'v2' }));
    expect(lines.filter((l) => l.kind === 'removed').map((l) => l.text)).toEqual(['-  a: { limits: { limit: 3 } }']);
    expect(lines.filter((l) => l.kind === 'added').map((l) => l.text)).toEqual(['+  a: { limits: { limit: 10 } }']);
    expect(lines.filter((l) => l.kind === 'file')).toHaveLength(2);
    expect(lines.filter((l) => l.kind === 'hunk')).toHaveLength(1);
    expect(lines.some((l) => l.kind === 'context' && l.text === '   b: {}')).toBe(true);
  });

  it('reads --- and +++ inside a hunk as removed and added lines', () => {
    const lines = classifyDiffLines('--- a\n+++ b\n@@ -1 +1 @@\n--- x\n+++ y\n');
    expect(lines.map((l) => l.kind)).toEqual(['file', 'file', 'hunk', 'removed', 'added']);
  });

  it('keeps markup as text and bounds the number of lines', () => {
    expect(classifyDiffLines('@@ -1 +1 @@\n+<img src=x onerror=alert(1)>\n')[1]).toEqual({
      kind: 'added',
      text: '+<img src=x onerror=alert(1)>',
    });
    expect(classifyDiffLines('')).toEqual([]);
    const long = classifyDiffLines(['@@ -1 +1,9 @@', ...Array.from({ length: 9 }, (_, i) => `+${i}`)].join('\n'), 4);
    expect(long).toHaveLength(5);
    expect(long[4]).toEqual({ kind: 'note', text: '… 6 more lines not shown' });
  });
});
