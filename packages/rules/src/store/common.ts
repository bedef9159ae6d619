import { ErrorCodes, SluiceError } from '@sluice/core';
import { z } from 'zod';
import { diffRuleSets } from '../diff.js';
import { RulesError, RulesErrorCodes, isRulesError } from '../errors.js';
import { formatPath, toPathIssues } from '../issues.js';
import { unifiedDiff } from '../line-diff.js';
import { compileRulesOffThread } from '../off-thread.js';
import type { RuleSet } from '../ruleset.js';
import type { ApplyOptions, RuleDiff, RuleVersion, RuleVersionMeta } from './types.js';

/** Longest author, reason and file name accepted. */
export const MAX_LABEL_LENGTH = 256;

/** Versions kept by default; older ones are pruned. */
export const DEFAULT_MAX_VERSIONS = 1000;

/** Parses options with `schema`; the first problem becomes core's `SLUICE_ERR_INVALID_OPTIONS`. */
export function compileOptions<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const r = schema.safeParse(value, { reportInput: true });
  if (r.success) return r.data;
  const [issue] = r.error.issues.flatMap((i) => toPathIssues(i));
  const field = formatPath(issue?.path ?? []) || what;
  throw new SluiceError(ErrorCodes.INVALID_OPTIONS, `${field}: ${issue?.message ?? 'is invalid'}`, { field });
}

const label = z.string().min(1, 'must not be empty').max(MAX_LABEL_LENGTH, `must be at most ${MAX_LABEL_LENGTH} characters`);

const applySchema = z.strictObject({
  author: label,
  reason: label,
  file: label.refine((f) => !/[\r\n]/.test(f), 'must be one line').optional(),
  expectedVersion: z.number().int('must be an integer').min(0, 'must be at least 0').optional(),
});

/** A validated change, ready to record. */
export interface Change {
  readonly source: string;
  readonly ruleSet: RuleSet;
  readonly author: string;
  readonly reason: string;
  readonly file: string;
  readonly expectedVersion: number | undefined;
  readonly rolledBackFrom: number | undefined;
}

/**
 * Validates a change's options and text; invalid text rejects with `SLUICE_ERR_INVALID_RULES`.
 * A large text is compiled off the event loop (see `compileRulesOffThread`).
 */
export async function prepareChange(text: unknown, options: ApplyOptions, rolledBackFrom?: number): Promise<Change> {
  const o = compileOptions(applySchema, options, 'options');
  if (typeof text !== 'string') {
    throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'text: must be a string', { field: 'text' });
  }
  const file = o.file ?? 'rules.yaml';
  const ruleSet = await compileRulesOffThread(text, { file });
  return { source: text, ruleSet, author: o.author, reason: o.reason, file, expectedVersion: o.expectedVersion, rolledBackFrom };
}

/** Checks a version number argument. */
export function checkVersion(version: unknown, field = 'version'): number {
  if (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 1) {
    throw new SluiceError(ErrorCodes.INVALID_OPTIONS, `${field}: must be a positive integer, got ${String(version)}`, {
      field,
    });
  }
  return version;
}

/** Checks `history`'s limit. */
export function checkLimit(limit: unknown, max: number): number {
  if (limit === undefined) return Math.min(50, max);
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > max) {
    throw new SluiceError(ErrorCodes.INVALID_OPTIONS, `limit: must be an integer between 1 and ${max}`, { field: 'limit' });
  }
  return limit;
}

export function notFound(version: number): RulesError {
  return new RulesError(
    RulesErrorCodes.RULE_VERSION_NOT_FOUND,
    `rule version ${version} does not exist (never made, or pruned)`,
    {
      version,
    },
  );
}

export function conflict(expected: number, current: number): RulesError {
  return new RulesError(
    RulesErrorCodes.RULE_CONFLICT,
    `expected current rule version ${expected}, but it is ${current}; re-read, re-apply the change on top of it and retry`,
    { version: current },
  );
}

export function corrupt(what: string, cause?: unknown): RulesError {
  return new RulesError(RulesErrorCodes.RULE_STORE_CORRUPT, `the rule store holds unreadable data: ${what}`, { cause });
}

export function closed(): SluiceError {
  return new SluiceError(ErrorCodes.CLOSED, 'the rule store is closed');
}

/** The metadata recorded with each version (as stored: every field validated on read). */
export const storedMetaSchema = z.strictObject({
  version: z.number().int().min(1),
  author: z.string(),
  reason: z.string(),
  createdAt: z.string(),
  hash: z.string(),
  file: z.string(),
  rolledBackFrom: z.number().int().min(1).optional(),
});

/** Freezes a version's record, leaving out an unset `rolledBackFrom`. */
export function metaOf(m: z.infer<typeof storedMetaSchema>): RuleVersionMeta {
  const { rolledBackFrom, ...rest } = m;
  return Object.freeze(rolledBackFrom === undefined ? rest : { ...rest, rolledBackFrom });
}

/** A stored version with its rule set compiled again from its text (off the event loop when large). */
export async function toRuleVersion(meta: RuleVersionMeta, source: string): Promise<RuleVersion> {
  let ruleSet: RuleSet;
  try {
    ruleSet = await compileRulesOffThread(source, { file: meta.file });
  } catch (e) {
    if (isRulesError(e)) throw corrupt(`version ${meta.version} no longer validates: ${e.message}`, e);
    throw e;
  }
  return Object.freeze({ ...meta, source, ruleSet });
}

/** Structured and textual difference between two versions. */
export function diffVersions(a: RuleVersion, b: RuleVersion): RuleDiff {
  return Object.freeze({
    ...diffRuleSets(a.ruleSet, b.ruleSet),
    from: a.version,
    to: b.version,
    text: unifiedDiff(a.source, b.source, { fromLabel: `v${a.version}/${a.file}`, toLabel: `v${b.version}/${b.file}` }),
  });
}

/** A few compiled versions, most recently used last (versions never change once made). */
export class VersionCache {
  readonly #max: number;
  readonly #map = new Map<number, RuleVersion>();

  constructor(max = 16) {
    this.#max = max;
  }

  get(version: number): RuleVersion | undefined {
    const v = this.#map.get(version);
    if (v) {
      this.#map.delete(version);
      this.#map.set(version, v);
    }
    return v;
  }

  set(v: RuleVersion): void {
    this.#map.delete(v.version);
    this.#map.set(v.version, v);
    while (this.#map.size > this.#max) this.#map.delete(this.#map.keys().next().value!);
  }

  /** Forgets versions that were pruned. */
  dropBelow(version: number): void {
    for (const k of [...this.#map.keys()]) if (k < version) this.#map.delete(k);
  }
}
