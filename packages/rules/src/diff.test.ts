import { describe, expect, it } from 'vitest';
import { compileRules, diffLines, diffRuleSets, unifiedDiff } from './index.js';

const before = compileRules(
  `
resources:
  api:
    limits:
      - { algorithm: gcra, limit: 100, burst: 10 }
      - { algorithm: fixed-window, limit: 10000, windowMs: 86400000 }
  old: { limits: { algorithm: gcra, limit: 1 } }
  same: { limits: { algorithm: gcra, limit: 1 } }
domains:
  - domain: edge
    descriptors:
      - key: ip
        rate_limit: { unit: second, requests_per_unit: 10 }
`,
  { file: 'rules.yaml' },
);

const after = compileRules(
  `
resources:
  api:
    shadow: true
    limits:
      - { algorithm: gcra, limit: 200, burst: 10 }
  new: { limits: { algorithm: gcra, limit: 1 } }
  same: { limits: { algorithm: gcra, limit: 1 } }
domains:
  - domain: edge
    descriptors:
      - key: ip
        rate_limit: { unit: minute, requests_per_unit: 10 }
  - domain: added
`,
  { file: 'rules.yaml' },
);

describe('diffRuleSets', () => {
  it('lists added, removed and changed resources with field paths and values', () => {
    const d = diffRuleSets(before, after);
    expect(d.same).toBe(false);
    expect(d.resources.added).toEqual(['new']);
    expect(d.resources.removed).toEqual(['old']);
    expect(d.resources.changed).toEqual([
      {
        name: 'api',
        changes: [
          { path: 'limits[0].limit', before: 100, after: 200 },
          { path: 'limits[1]', before: { algorithm: 'fixed-window', limit: 10000, windowMs: 86400000 } },
          { path: 'shadow', before: false, after: true },
        ],
      },
    ]);
  });

  it('compares envoy domains by their normalized descriptors', () => {
    const d = diffRuleSets(before, after);
    expect(d.domains.added).toEqual(['added']);
    expect(d.domains.changed).toEqual([
      { name: 'edge', changes: [{ path: 'descriptors[0].rate_limit.unit', before: 'second', after: 'minute' }] },
    ]);
  });

  it('finds nothing between a rule set and itself', () => {
    const d = diffRuleSets(before, before);
    expect(d).toEqual({
      resources: { added: [], removed: [], changed: [] },
      domains: { added: [], removed: [], changed: [] },
      governance: { added: [], removed: [], changed: [] },
      quota: { added: [], removed: [], changed: [] },
      same: true,
    });
  });
});

/** A small deterministic generator, so failures reproduce. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function applyOps(ops: ReturnType<typeof diffLines>): { a: string[]; b: string[] } {
  return {
    a: ops.filter((o) => o.op !== '+').map((o) => o.line),
    b: ops.filter((o) => o.op !== '-').map((o) => o.line),
  };
}

describe('line diff', () => {
  it('prints a unified diff as diff -u does', () => {
    // Expected text as GNU diff -u prints it for these two files (less its timestamps).
    const a = 'a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\n';
    const b = 'a\nb\nc\nD\ne\nf\ng\nh\ni\nj\nk\nl\nm\n';
    expect(unifiedDiff(a, b, { fromLabel: 'v1/rules.yaml', toLabel: 'v2/rules.yaml' })).toBe(
      [
        '--- v1/rules.yaml',
        '+++ v2/rules.yaml',
        '@@ -1,7 +1,7 @@',
        ' a',
        ' b',
        ' c',
        '-d',
        '+D',
        ' e',
        ' f',
        ' g',
        '@@ -10,3 +10,4 @@',
        ' j',
        ' k',
        ' l',
        '+m',
        '',
      ].join('\n'),
    );
  });

  it('merges changes whose contexts touch, and numbers empty ranges as diff does', () => {
    expect(unifiedDiff('x\n', 'x\ny\n')).toBe('--- a\n+++ b\n@@ -1 +1,2 @@\n x\n+y\n');
    expect(unifiedDiff('', 'y\n')).toBe('--- a\n+++ b\n@@ -0,0 +1 @@\n+y\n');
    // Six unchanged lines between two changes: one hunk (diff -u merges gaps up to 2 x 3).
    expect(unifiedDiff('1\n2\n3\n4\n5\n6\n7\n8\n9\n', '1\nX\n3\n4\n5\n6\n7\n8\nY\n')).toContain('@@ -1,9 +1,9 @@');
    expect(unifiedDiff('same\n', 'same\n')).toBe('');
  });

  it('finds a shortest edit script that rebuilds both texts', () => {
    const next = rng(42);
    for (let round = 0; round < 200; round++) {
      const make = () => Array.from({ length: Math.floor(next() * 30) }, () => 'abcde'[Math.floor(next() * 5)]!);
      const a = make();
      const b = make();
      const ops = diffLines(a.join('\n'), b.join('\n'));
      expect(applyOps(ops)).toEqual({ a, b });
      // Shortest: the kept lines are a longest common subsequence.
      const kept = ops.filter((o) => o.op === ' ').length;
      expect(kept).toBe(lcs(a, b));
    }
  });

  it('still rebuilds both texts past the edit bound, replacing the middle', () => {
    const a = Array.from({ length: 50 }, (_, i) => `a${i}`);
    const b = Array.from({ length: 50 }, (_, i) => `b${i}`);
    const ops = diffLines(['head', ...a, 'tail'].join('\n'), ['head', ...b, 'tail'].join('\n'), 10);
    expect(applyOps(ops)).toEqual({ a: ['head', ...a, 'tail'], b: ['head', ...b, 'tail'] });
    expect(ops.map((o) => o.op).join('')).toBe(` ${'-'.repeat(50)}${'+'.repeat(50)} `);
  });
});

function lcs(a: readonly string[], b: readonly string[]): number {
  const dp = Array.from({ length: a.length + 1 }, () => new Array<number>(b.length + 1).fill(0));
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++)
      dp[i]![j] = a[i - 1] === b[j - 1] ? dp[i - 1]![j - 1]! + 1 : Math.max(dp[i - 1]![j]!, dp[i]![j - 1]!);
  return dp[a.length]![b.length]!;
}
