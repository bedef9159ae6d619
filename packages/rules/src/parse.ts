import { Document, isAlias, isMap, isPair, isScalar, parseDocument, Scalar, visit, type YAMLError } from 'yaml';
import type { PathIssue } from './issues.js';

/** The syntaxes a rule file may be written in. JSON is read as JSON, strictly. */
export type RuleFormat = 'yaml' | 'json';

/** Largest rule text accepted, in bytes (UTF-8). */
export const MAX_RULES_BYTES = 1024 * 1024;

/** The format named by `format`, else by the file's extension (`.json`), else YAML. */
export function formatOf(file: string, format?: RuleFormat): RuleFormat {
  if (format !== undefined) return format;
  return /\.json$/i.test(file) ? 'json' : 'yaml';
}

/** The parsed content of a rule file, or why it could not be parsed. */
export type ParseResult =
  | { readonly ok: true; readonly value: unknown; readonly envoy: boolean }
  | { readonly ok: false; readonly issues: readonly PathIssue[] };

// logLevel 'error': the library would otherwise print its warnings on the process; they are
// reported as problems of the file instead.
const YAML_OPTIONS = { uniqueKeys: true, strict: true, prettyErrors: true, maxAliasCount: 100, logLevel: 'error' } as const;

function yamlIssue(err: YAMLError): PathIssue {
  const pos = err.linePos?.[0];
  // The library appends " at line L, column C:" and a source excerpt; the position is reported
  // once, in front, and the excerpt left out.
  const text = err.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
  if (err.code === 'MULTIPLE_DOCS') {
    return {
      path: [],
      message: `line ${pos?.line ?? '?'}, column ${pos?.col ?? '?'}: a rule file holds one YAML document; a second one starts here`,
    };
  }
  return { path: [], message: pos ? `line ${pos.line}, column ${pos.col}: ${text}` : text };
}

/**
 * Problems the YAML library does not count as errors but a rule file must not have: warnings
 * (an unknown tag), keys that are lists or mappings (JavaScript would turn them into strings),
 * aliases with no anchor before them.
 */
function structureIssues(doc: Document, text: string): PathIssue[] {
  const issues: PathIssue[] = doc.warnings.map(yamlIssue);
  const at = (offset: number | undefined, message: string) => {
    const pos = offset === undefined ? undefined : lineCol(text, offset);
    issues.push({ path: [], message: pos ? `line ${pos.line}, column ${pos.col}: ${message}` : message });
  };
  visit(doc, {
    Pair(_, pair) {
      if (pair.key !== null && !isScalar(pair.key) && !isAlias(pair.key)) {
        const range = (pair.key as { range?: [number, number, number] }).range;
        at(range?.[0], 'a mapping key must be a plain value, not a list or a mapping');
      }
    },
    Alias(_, alias) {
      if (alias.resolve(doc) === undefined) {
        at(alias.range?.[0], `unresolved alias *${alias.source} (the anchor must be set before the alias)`);
      }
    },
  });
  return issues;
}

function lineCol(text: string, offset: number): { line: number; col: number } {
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  return { line, col: offset - before.lastIndexOf('\n') };
}

function jsonIssue(text: string, err: unknown, doc: Document): PathIssue {
  const raw = err instanceof Error ? err.message : String(err);
  // V8 quotes the whole input after the reason; keep the reason.
  const reason = raw.replace(/, "[\s\S]*" is not valid JSON$/, '').replace(/ in JSON at position \d+.*$/s, '');
  const at = /at position (\d+)/.exec(raw);
  const pos = at ? lineCol(text, Number(at[1])) : doc.errors[0]?.linePos?.[0];
  return { path: [], message: `${pos ? `line ${pos.line}, column ${pos.col}: ` : ''}invalid JSON: ${reason}` };
}

/** Envoy fields whose YAML scalars are read as their source text, as Go's yaml.v2 does. */
const ENVOY_STRING_FIELDS = new Set(['key', 'value', 'name']);

/**
 * envoyproxy/ratelimit unmarshals `key`, `value` and `name` into Go strings with yaml.v2, which
 * takes any scalar's text as is (`value: 200` is "200", `value: 010` is "010", an empty value
 * is ""). Rewrites those scalars into strings of their source text so such files load
 * unchanged. `metadata` is free-form and left alone.
 */
function envoyStrings(doc: Document): void {
  visit(doc, {
    Pair(_, pair) {
      if (!isScalar(pair.key)) return undefined;
      const name = String(pair.key.value);
      if (name === 'metadata') return visit.SKIP;
      if (!ENVOY_STRING_FIELDS.has(name)) return undefined;
      if (pair.value === null || (isScalar(pair.value) && pair.value.value === null)) {
        pair.value = new Scalar('');
      } else if (isScalar(pair.value) && typeof pair.value.value !== 'string') {
        pair.value = new Scalar(pair.value.source ?? String(pair.value.value));
      }
      return undefined;
    },
  });
}

/** True when the document's top level is a mapping with a `domain` key (an envoy file). */
function isEnvoy(doc: Document): boolean {
  const root = doc.contents;
  return isMap(root) && root.items.some((p) => isPair(p) && isScalar(p.key) && p.key.value === 'domain');
}

/**
 * Parses rule text. YAML is read as YAML 1.2 with unique keys; an envoy file (top-level
 * `domain`) is read again as YAML 1.1, the dialect of the Go library envoy uses (so `yes` is a
 * boolean there, as in envoy). JSON must be valid JSON; duplicate keys are rejected in both.
 */
export function parseRuleText(text: string, format: RuleFormat): ParseResult {
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > MAX_RULES_BYTES) {
    return { ok: false, issues: [{ path: [], message: `is ${bytes} bytes, the bound is ${MAX_RULES_BYTES}` }] };
  }
  let doc = parseDocument(text, { ...YAML_OPTIONS, version: '1.2' });
  if (format === 'json') {
    try {
      JSON.parse(text);
    } catch (e) {
      return { ok: false, issues: [jsonIssue(text, e, doc)] };
    }
    // Valid JSON is valid YAML 1.2; the YAML reader is used only because it reports duplicates.
    const dup = doc.errors.filter((e) => e.code === 'DUPLICATE_KEY');
    if (dup.length > 0) return { ok: false, issues: dup.map(yamlIssue) };
  } else if (doc.errors.length > 0) {
    return { ok: false, issues: doc.errors.map(yamlIssue) };
  }
  const structure = structureIssues(doc, text);
  if (structure.length > 0) return { ok: false, issues: structure };
  const envoy = isEnvoy(doc);
  if (envoy && format === 'yaml') {
    doc = parseDocument(text, { ...YAML_OPTIONS, version: '1.1' });
    if (doc.errors.length > 0) return { ok: false, issues: doc.errors.map(yamlIssue) };
  }
  if (envoy) envoyStrings(doc);
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: 100 });
  } catch (e) {
    // Alias expansion beyond the bound (a "billion laughs" file) ends here.
    return { ok: false, issues: [{ path: [], message: e instanceof Error ? e.message : String(e) }] };
  }
  if (value === null || value === undefined) {
    return {
      ok: false,
      issues: [{ path: [], message: 'the file is empty; expected a mapping with "resources" (or "domain" for an envoy file)' }],
    };
  }
  return { ok: true, value, envoy };
}

/** Deepest nesting of lists and mappings a rule file may have. */
export const MAX_DEPTH = 64;

/**
 * Problems of the parsed value as a whole: nesting deeper than {@link MAX_DEPTH} (no rule needs
 * it, and validating it recursively would exhaust the stack), and `__proto__` as a key, which
 * names no rule and which the schema library would drop silently (a resource that vanishes
 * without a word).
 */
export function valueIssues(value: unknown, path: (string | number)[] = []): PathIssue[] {
  if (typeof value !== 'object' || value === null) return [];
  if (path.length >= MAX_DEPTH) return [{ path, message: `is nested deeper than ${MAX_DEPTH} levels` }];
  if (Array.isArray(value)) return value.flatMap((v, i) => valueIssues(v, [...path, i]));
  return Object.keys(value).flatMap((k) =>
    k === '__proto__'
      ? [{ path: [...path, k], message: 'is not allowed as a name' }]
      : valueIssues((value as Record<string, unknown>)[k], [...path, k]),
  );
}
