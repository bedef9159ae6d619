/**
 * How the dashboard shows a unified diff (`GET /v1/admin/rules/diff` answers one as `text`):
 * each line classified, so the page can colour it while still inserting it as plain text. The
 * diff itself is computed in one place only, on the server (`unifiedDiff` of `@sluice/rules`);
 * this reads its text and computes nothing.
 *
 * This module runs in the browser (the dashboard loads its compiled form as an ES module): it
 * must import nothing at run time and use nothing of Node.
 */

/** What a diff line is. */
export type DiffLineKind = 'file' | 'hunk' | 'added' | 'removed' | 'context' | 'note';

/** One classified line of a unified diff. */
export interface DiffLine {
  readonly kind: DiffLineKind;
  readonly text: string;
}

/** Most lines shown; a larger diff ends with a note saying how many lines were left out. */
export const MAX_DIFF_LINES = 5000;

/** Splits a unified diff into classified lines, at most `maxLines` of them (plus a closing note). */
export function classifyDiffLines(text: string, maxLines = MAX_DIFF_LINES): DiffLine[] {
  if (text === '') return [];
  const lines = (text.endsWith('\n') ? text.slice(0, -1) : text).split(/\r?\n/);
  // `---`/`+++` name the files only before the first hunk; inside a hunk they are a removed
  // `-- ...` or an added `++ ...` line of the rules.
  let inHunk = false;
  const out = lines.slice(0, maxLines).map((line): DiffLine => {
    if (line.startsWith('@@')) inHunk = true;
    return { kind: kindOf(line, inHunk), text: line };
  });
  if (lines.length > maxLines) out.push({ kind: 'note', text: `… ${lines.length - maxLines} more lines not shown` });
  return out;
}

function kindOf(line: string, inHunk: boolean): DiffLineKind {
  if (line.startsWith('@@')) return 'hunk';
  if (!inHunk) return line.startsWith('+++ ') || line.startsWith('--- ') ? 'file' : 'note';
  if (line.startsWith('+')) return 'added';
  if (line.startsWith('-')) return 'removed';
  if (line.startsWith('\\')) return 'note';
  return 'context';
}
