/** One line of an edit script: kept (`' '`), removed (`'-'`) or added (`'+'`). */
export interface LineOp {
  readonly op: ' ' | '-' | '+';
  readonly line: string;
}

/**
 * Past this many changed lines the diff stops looking for the shortest edit and replaces the
 * differing middle wholesale: Myers' search costs O((N+M)·D) time and O(D²) memory, and a
 * diff that large is read as "rewritten" anyway.
 */
export const MAX_EDIT_DISTANCE = 2000;

function lines(text: string): string[] {
  if (text === '') return [];
  return (text.endsWith('\n') ? text.slice(0, -1) : text).split(/\r?\n/);
}

/** Myers' shortest edit script between `a` and `b` (as ids), or undefined past `maxD` edits. */
function myers(a: Int32Array, b: Int32Array, maxD: number): LineOp[] | undefined {
  const n = a.length;
  const m = b.length;
  const max = n + m;
  const off = max + 1;
  const v = new Int32Array(2 * max + 3);
  // trace[d] holds v over k in [-d-1, d+1] as it was before step d.
  const trace: Int32Array[] = [];
  for (let d = 0; d <= Math.min(max, maxD); d++) {
    trace.push(v.slice(off - d - 1, off + d + 2));
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && v[off + k - 1]! < v[off + k + 1]!) ? v[off + k + 1]! : v[off + k - 1]! + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      v[off + k] = x;
      if (x >= n && y >= m) return backtrack(trace, d, n, m);
    }
  }
  return undefined;
}

function backtrack(trace: Int32Array[], dEnd: number, n: number, m: number): LineOp[] {
  // Ops are produced as index pairs and turned into lines by the caller.
  const ops: ('=' | '-' | '+')[] = [];
  let x = n;
  let y = m;
  for (let d = dEnd; d > 0; d--) {
    const snap = trace[d]!;
    const at = (k: number) => snap[k + d + 1]!;
    const k = x - y;
    const down = k === -d || (k !== d && at(k - 1) < at(k + 1));
    const prevK = down ? k + 1 : k - 1;
    const prevX = at(prevK);
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      ops.push('=');
      x--;
      y--;
    }
    ops.push(down ? '+' : '-');
    x = prevX;
    y = prevY;
  }
  while (x > 0 && y > 0) {
    ops.push('=');
    x--;
    y--;
  }
  return ops.reverse().map((op) => ({ op: op === '=' ? ' ' : op, line: '' }));
}

/** The line-by-line edit script turning `a` into `b`. */
export function diffLines(a: string, b: string, maxEditDistance = MAX_EDIT_DISTANCE): LineOp[] {
  const la = lines(a);
  const lb = lines(b);
  let start = 0;
  while (start < la.length && start < lb.length && la[start] === lb[start]) start++;
  let endA = la.length;
  let endB = lb.length;
  while (endA > start && endB > start && la[endA - 1] === lb[endB - 1]) {
    endA--;
    endB--;
  }
  const ids = new Map<string, number>();
  const id = (s: string) => {
    let i = ids.get(s);
    if (i === undefined) ids.set(s, (i = ids.size));
    return i;
  };
  const midA = Int32Array.from(la.slice(start, endA), id);
  const midB = Int32Array.from(lb.slice(start, endB), id);
  const script = myers(midA, midB, maxEditDistance) ?? [
    ...Array.from(midA, () => ({ op: '-' as const, line: '' })),
    ...Array.from(midB, () => ({ op: '+' as const, line: '' })),
  ];
  const out: LineOp[] = la.slice(0, start).map((line) => ({ op: ' ', line }));
  let i = start;
  let j = start;
  for (const s of script) {
    if (s.op === ' ') {
      out.push({ op: ' ', line: la[i]! });
      i++;
      j++;
    } else if (s.op === '-') out.push({ op: '-', line: la[i++]! });
    else out.push({ op: '+', line: lb[j++]! });
  }
  for (const line of la.slice(endA)) out.push({ op: ' ', line });
  return out;
}

/** Options of {@link unifiedDiff}. */
export interface UnifiedDiffOptions {
  /** Label of the old text in the `---` header. @default 'a' */
  fromLabel?: string;
  /** Label of the new text in the `+++` header. @default 'b' */
  toLabel?: string;
  /** Unchanged lines shown around each change. @default 3 */
  context?: number;
}

function range(start: number, count: number): string {
  // As GNU diff: a one-line range has no count, an empty one names the line before it.
  if (count === 1) return String(start);
  return `${count === 0 ? start - 1 : start},${count}`;
}

/** A unified diff (as `diff -u` prints it) from `a` to `b`; empty when they are equal. */
export function unifiedDiff(a: string, b: string, options: UnifiedDiffOptions = {}): string {
  const context = options.context ?? 3;
  const ops = diffLines(a, b);
  const changed = ops.map((o, i) => (o.op === ' ' ? -1 : i)).filter((i) => i >= 0);
  if (changed.length === 0) return '';
  const out = [`--- ${options.fromLabel ?? 'a'}`, `+++ ${options.toLabel ?? 'b'}`];
  // Line numbers (1-based) in a and b before each op.
  const posA: number[] = [];
  const posB: number[] = [];
  let na = 1;
  let nb = 1;
  for (const o of ops) {
    posA.push(na);
    posB.push(nb);
    if (o.op !== '+') na++;
    if (o.op !== '-') nb++;
  }
  let h = 0;
  while (h < changed.length) {
    let from = Math.max(0, changed[h]! - context);
    let to = Math.min(ops.length, changed[h]! + context + 1);
    h++;
    while (h < changed.length && changed[h]! - context <= to) {
      to = Math.min(ops.length, changed[h]! + context + 1);
      h++;
    }
    from = Math.max(0, from);
    const slice = ops.slice(from, to);
    const countA = slice.filter((o) => o.op !== '+').length;
    const countB = slice.filter((o) => o.op !== '-').length;
    out.push(`@@ -${range(posA[from]!, countA)} +${range(posB[from]!, countB)} @@`);
    for (const o of slice) out.push(`${o.op}${o.line}`);
  }
  return `${out.join('\n')}\n`;
}
