import { isSluiceError } from '@sluice/core';
import type { z } from 'zod';

/** A location in a rule file: mapping keys and list indexes, outermost first. */
export type Path = readonly (string | number)[];

/** An issue before it is attached to a file. */
export interface PathIssue {
  readonly path: Path;
  readonly message: string;
}

const BARE = /^[A-Za-z_][A-Za-z0-9_-]*$/;

/**
 * Renders a path the way users read it: `resources."db:users".limits[0].burst`. Keys that are
 * not plain words are quoted so a `.` or `:` inside a resource name cannot be misread.
 */
export function formatPath(path: Path): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else out += `${out === '' ? '' : '.'}${BARE.test(seg) ? seg : JSON.stringify(seg)}`;
  }
  return out;
}

/** Short description of a value for messages (strings quoted and truncated). */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  switch (typeof value) {
    case 'object':
      return 'a mapping';
    case 'string':
      return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value);
    case 'number':
    case 'boolean':
    case 'bigint':
      return String(value);
    default:
      return typeof value;
  }
}

const TYPE_NAMES: Record<string, string> = {
  object: 'a mapping',
  record: 'a mapping',
  array: 'a list',
  string: 'a string',
  number: 'a number',
  boolean: 'a boolean',
};

function typeName(expected: string): string {
  return TYPE_NAMES[expected] ?? expected;
}

type Issue = z.core.$ZodIssue;

/** The issues of a union's branch that fits the input's kind, or a merged "must be X or Y". */
function unionIssues(issue: Extract<Issue, { code: 'invalid_union' }>, base: Path): PathIssue[] {
  const branches = issue.errors;
  const atRoot = (b: readonly Issue[]) =>
    b.length === 1 && b[0]!.path.length === 0 && (b[0]!.code === 'invalid_type' || b[0]!.code === 'invalid_value');
  const fitting = branches.filter((b) => !atRoot(b));
  if (fitting.length > 0) return fitting[0]!.flatMap((i) => toPathIssues(i, base));
  const expected = branches.map((b) => {
    const i = b[0]!;
    if (i.code === 'invalid_type') return typeName(i.expected);
    if (i.code === 'invalid_value') return i.values.map((v) => JSON.stringify(v)).join(' or ');
    return 'valid';
  });
  return [{ path: base, message: `must be ${expected.join(' or ')}, got ${describe(issue.input)}` }];
}

/** Rewrites one zod issue (with `reportInput`) in this package's wording, one issue per problem. */
export function toPathIssues(issue: Issue, prefix: Path = []): PathIssue[] {
  const path = [...prefix, ...(issue.path as (string | number)[])];
  switch (issue.code) {
    case 'unrecognized_keys':
      return issue.keys.map((k) => ({ path: [...path, k], message: 'unknown field' }));
    case 'invalid_type':
      if (issue.input === undefined) return [{ path, message: 'is required' }];
      return [{ path, message: `must be ${typeName(issue.expected)}, got ${describe(issue.input)}` }];
    case 'invalid_value':
      return [
        {
          path,
          message: `must be one of ${issue.values.map((v) => String(v)).join(', ')}, got ${describe(issue.input)}`,
        },
      ];
    case 'invalid_union':
      if (issue.input === undefined) return [{ path, message: 'is required' }];
      return unionIssues(issue, path);
    case 'too_small':
    case 'too_big': {
      // A message the schema set itself is kept; zod's own wording is replaced.
      if (!/^Too (small|big)/.test(issue.message)) return [{ path, message: issue.message }];
      const bound = issue.code === 'too_small' ? `at least ${String(issue.minimum)}` : `at most ${String(issue.maximum)}`;
      const unit = issue.origin === 'string' ? ' characters' : issue.origin === 'array' ? ' items' : '';
      return [{ path, message: `must be ${bound}${unit}, got ${describe(issue.input)}` }];
    }
    case 'invalid_key':
      return issue.issues.flatMap((i) => toPathIssues(i, path));
    case 'invalid_element':
      return issue.issues.flatMap((i) => toPathIssues(i, path));
    default:
      return [{ path, message: issue.message }];
  }
}

/** Splits a core field suffix such as `[0].burst` or `.limits[1].id` into path segments. */
export function parseField(suffix: string): (string | number)[] {
  const out: (string | number)[] = [];
  const re = /\[(\d+)\]|\.([^.[]+)/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(suffix)) !== null) out.push(m[1] !== undefined ? Number(m[1]) : m[2]!);
  return out;
}

/**
 * Runs a core validation and turns the `SluiceError` it throws into an issue located in the
 * rule file. Core names fields as `<prefix>.limits[0].burst`; `prefix` is what was passed to
 * it, `at` where that prefix sits in the file. Its message is reused as is.
 */
export function coreIssue(run: () => unknown, prefix: string, at: Path): PathIssue | undefined {
  try {
    run();
    return undefined;
  } catch (e) {
    if (!isSluiceError(e)) throw e;
    const field = e.field ?? '';
    const message = e.message.startsWith(`${field}: `) ? e.message.slice(field.length + 2) : e.message;
    let rel: (string | number)[] = field === '' ? [] : [field];
    if (field.startsWith(prefix)) {
      const rest = field.slice(prefix.length);
      rel = parseField(rest === '' || rest.startsWith('.') || rest.startsWith('[') ? rest : `.${rest}`);
    }
    return { path: [...at, ...rel], message };
  }
}

/**
 * Core validates a single limit written without a list as the list's element `[0]`; in the
 * file there is no index there. Drops the index that follows `limits` in such a path.
 */
export function unlistLimits(path: Path, limitsAt: number): Path {
  if (path[limitsAt + 1] !== 0) return path;
  return [...path.slice(0, limitsAt + 1), ...path.slice(limitsAt + 2)];
}
