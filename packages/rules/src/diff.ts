import { formatPath, type Path } from './issues.js';
import { canonicalJson, type RuleSet } from './ruleset.js';

/** One changed field. `before` is absent for an added field, `after` for a removed one. */
export interface FieldChange {
  /** Path of the field within its resource or domain, e.g. `limits[0].burst`. */
  readonly path: string;
  readonly before?: unknown;
  readonly after?: unknown;
}

/** How one section (resources, or domains) changed. */
export interface SectionDiff {
  /** Names present only in the new rule set, sorted. */
  readonly added: readonly string[];
  /** Names present only in the old rule set, sorted. */
  readonly removed: readonly string[];
  /** Names present in both whose content differs, sorted, each with its changed fields. */
  readonly changed: readonly { readonly name: string; readonly changes: readonly FieldChange[] }[];
}

/** The structured difference between two rule sets. */
export interface RuleSetDiff {
  readonly resources: SectionDiff;
  readonly domains: SectionDiff;
  /** Governance rules added, removed and changed, by id. */
  readonly governance: SectionDiff;
  /** RLQS domains added, removed and changed (their bucket entries, by position). */
  readonly quota: SectionDiff;
  /** True when nothing differs (the hashes are equal). */
  readonly same: boolean;
}

const plain = (v: unknown): unknown => (v === undefined ? undefined : JSON.parse(canonicalJson(v)));

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Field-level changes between two JSON values: objects by key, lists by position. */
export function fieldChanges(before: unknown, after: unknown, path: Path = []): FieldChange[] {
  if (Array.isArray(before) && Array.isArray(after)) {
    const out: FieldChange[] = [];
    for (let i = 0; i < Math.max(before.length, after.length); i++) {
      if (i >= after.length) out.push({ path: formatPath([...path, i]), before: before[i] });
      else if (i >= before.length) out.push({ path: formatPath([...path, i]), after: after[i] });
      else out.push(...fieldChanges(before[i], after[i], [...path, i]));
    }
    return out;
  }
  if (isObject(before) && isObject(after)) {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
    return keys.flatMap((k) => {
      if (!Object.hasOwn(after, k)) return [{ path: formatPath([...path, k]), before: before[k] }];
      if (!Object.hasOwn(before, k)) return [{ path: formatPath([...path, k]), after: after[k] }];
      return fieldChanges(before[k], after[k], [...path, k]);
    });
  }
  if (canonicalJson(before) === canonicalJson(after)) return [];
  return [{ path: formatPath(path), before, after }];
}

function section(before: Readonly<Record<string, unknown>>, after: Readonly<Record<string, unknown>>): SectionDiff {
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  const added: string[] = [];
  const removed: string[] = [];
  const changed: { name: string; changes: FieldChange[] }[] = [];
  for (const name of names) {
    if (!Object.hasOwn(before, name)) added.push(name);
    else if (!Object.hasOwn(after, name)) removed.push(name);
    else {
      const changes = fieldChanges(plain(before[name]), plain(after[name]));
      if (changes.length > 0) changed.push({ name, changes });
    }
  }
  return { added, removed, changed };
}

/**
 * What changed from `before` to `after`: resources, domains, governance rules and quota domains added, removed,
 * and changed field by field (domains compare their normalized descriptors).
 */
export function diffRuleSets(before: RuleSet, after: RuleSet): RuleSetDiff {
  const descriptors = (rs: RuleSet) =>
    Object.fromEntries(Object.entries(rs.domains).map(([n, d]) => [n, { descriptors: d.descriptors }]));
  return {
    resources: section(before.resources, after.resources),
    domains: section(descriptors(before), descriptors(after)),
    governance: section(before.governance, after.governance),
    quota: section(before.quota, after.quota),
    same: before.hash === after.hash,
  };
}
