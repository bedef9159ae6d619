import { createHash } from 'node:crypto';
import { z } from 'zod';
import { toAdaptiveRules, type AdaptiveRules } from './adaptive.js';
import { compileDomain, type CompiledDomain, type EnvoyDescriptor } from './envoy/compile.js';
import { EnvoyDomain } from './envoy/match.js';
import { envoyDomainSchema, type EnvoyDomainInput } from './envoy/schema.js';
import { invalidRules, type RuleIssue } from './errors.js';
import { toGovernanceRules, type GovernanceRules } from './governance.js';
import { formatPath, toPathIssues, type Path, type PathIssue } from './issues.js';
import { nativeSchema, toResourceRule, type ResourceRule } from './native.js';
import { formatOf, parseRuleText, valueIssues, type RuleFormat } from './parse.js';
import { toQuotaRules, type QuotaRules } from './quota.js';

/**
 * A validated, frozen set of rules: resources for core's `Limiter` and envoy domains with their
 * matchers. Two rule sets with the same content have the same `hash`, however their files were
 * formatted.
 */
export interface RuleSet {
  /** Resource name -> its rule, ready for `limiter.setResources(rules.resources)`. */
  readonly resources: Readonly<Record<string, ResourceRule>>;
  /** envoy domain name -> its compiled descriptors. */
  readonly domains: Readonly<Record<string, EnvoyDomain>>;
  /** Governance rule id -> its rule, for the aggregators of `@sluice/governance`. */
  readonly governance: GovernanceRules;
  /** Resource name -> how the service moves its limit (see `adaptive` in a rule file). */
  readonly adaptive: AdaptiveRules;
  /** RLQS domain -> the resources its buckets draw on (see `quota` in a rule file). */
  readonly quota: QuotaRules;
  /** sha256 (hex) of the canonical JSON of `resources`, `domains`, `governance`, `adaptive` and `quota`. */
  readonly hash: string;
}

/** Options of {@link compileRules}. */
export interface CompileRulesOptions {
  /** The file name used in every error message (and to tell JSON by its extension). */
  file: string;
  /** @default 'json' for a `.json` file, else 'yaml' */
  format?: RuleFormat;
}

const native = nativeSchema(envoyDomainSchema);

/** JSON with object keys sorted at every level: one text per content. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return v;
    const json = v as { toJSON?: () => unknown };
    if (typeof json.toJSON === 'function') return json.toJSON();
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, (v as Record<string, unknown>)[k]]),
    );
  });
}

/**
 * The content a rule set's hash covers, as plain data. `governance`, `adaptive` and `quota` are
 * left out when empty, so the hash of a rule set without them is what it was before the sections
 * existed.
 */
export function ruleSetContent(
  resources: RuleSet['resources'],
  domains: Readonly<Record<string, { readonly descriptors: readonly EnvoyDescriptor[] }>>,
  governance: GovernanceRules = {},
  adaptive: AdaptiveRules = {},
  quota: QuotaRules = {},
): unknown {
  const content: Record<string, unknown> = {
    resources,
    domains: Object.fromEntries(Object.entries(domains).map(([name, d]) => [name, { descriptors: d.descriptors }])),
  };
  if (Object.keys(governance).length > 0) content.governance = governance;
  if (Object.keys(adaptive).length > 0) content.adaptive = adaptive;
  if (Object.keys(quota).length > 0) content.quota = quota;
  return content;
}

/** Builds the frozen rule set and its hash. */
export function makeRuleSet(
  resources: Record<string, ResourceRule>,
  domains: Record<string, EnvoyDomain>,
  governance: GovernanceRules = {},
  adaptive: AdaptiveRules = {},
  quota: QuotaRules = {},
): RuleSet {
  const r = Object.freeze({ ...resources });
  const d = Object.freeze({ ...domains });
  const g = Object.freeze({ ...governance });
  const a = Object.freeze({ ...adaptive });
  const q = Object.freeze({ ...quota });
  const hash = createHash('sha256')
    .update(canonicalJson(ruleSetContent(r, d, g, a, q)))
    .digest('hex');
  return Object.freeze({ resources: r, domains: d, governance: g, adaptive: a, quota: q, hash });
}

function attach(file: string, issues: readonly PathIssue[]): RuleIssue[] {
  return issues.map((i) => Object.freeze({ file, path: formatPath(i.path), message: i.message }));
}

function zodIssues(error: z.ZodError, prefix: Path = []): PathIssue[] {
  return error.issues.flatMap((i) => toPathIssues(i, prefix));
}

function compileDomains(inputs: readonly EnvoyDomainInput[], at: (i: number) => Path, issues: PathIssue[]) {
  const domains: Record<string, CompiledDomain> = {};
  inputs.forEach((input, i) => {
    const compiled = compileDomain(input, at(i), issues);
    if (!compiled) return;
    if (Object.hasOwn(domains, compiled.domain)) {
      issues.push({ path: [...at(i), 'domain'], message: `duplicate domain '${compiled.domain}'` });
      return;
    }
    domains[compiled.domain] = compiled;
  });
  return domains;
}

/**
 * A compiled rule set as plain data: what {@link compileRuleParts} returns, and what a worker
 * thread can send back (envoy domains as their compiled trees, not as {@link EnvoyDomain}s).
 */
export interface RuleSetParts extends Omit<RuleSet, 'domains'> {
  /** envoy domain name -> its compiled descriptors, as plain data. */
  readonly domains: Readonly<Record<string, CompiledDomain>>;
}

function parts(
  resources: Record<string, ResourceRule>,
  domains: Record<string, CompiledDomain>,
  governance: GovernanceRules = {},
  adaptive: AdaptiveRules = {},
  quota: QuotaRules = {},
): RuleSetParts {
  const hash = createHash('sha256')
    .update(canonicalJson(ruleSetContent(resources, domains, governance, adaptive, quota)))
    .digest('hex');
  return { resources, domains, governance, adaptive, quota, hash };
}

/** The rule set of {@link compileRuleParts}'s result (its hash kept, not computed again). */
export function ruleSetOf(p: RuleSetParts): RuleSet {
  const domains = Object.fromEntries(Object.entries(p.domains).map(([name, d]) => [name, new EnvoyDomain(d)]));
  return Object.freeze({
    resources: Object.freeze({ ...p.resources }),
    domains: Object.freeze(domains),
    governance: Object.freeze({ ...p.governance }),
    adaptive: Object.freeze({ ...p.adaptive }),
    quota: Object.freeze({ ...p.quota }),
    hash: p.hash,
  });
}

/**
 * Parses and validates rule text: a native Sluice file (`resources:`, optional inline envoy
 * `domains:`) or an envoyproxy/ratelimit file (top-level `domain:`). Throws a `RulesError`
 * (`SLUICE_ERR_INVALID_RULES`) listing every problem, each prefixed with `file` and its path.
 * This runs on the calling thread: a rule text near the bound (`MAX_RULES_BYTES`) takes seconds;
 * `compileRulesOffThread` keeps such work off an event loop that serves decisions.
 *
 * @example
 * const rules = compileRules(readFileSync('rules.yaml', 'utf8'), { file: 'rules.yaml' });
 * limiter.setResources(rules.resources);
 */
export function compileRules(text: string, options: CompileRulesOptions): RuleSet {
  return ruleSetOf(compileRuleParts(text, options));
}

/** {@link compileRules}, as plain data. */
export function compileRuleParts(text: string, options: CompileRulesOptions): RuleSetParts {
  const { file } = options;
  const parsed = parseRuleText(text, formatOf(file, options.format));
  if (!parsed.ok) throw invalidRules(attach(file, parsed.issues));
  const value = parsed.value;
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw invalidRules(
      attach(file, [
        {
          path: [],
          message: `must be a mapping with "resources" (or "domain" for an envoy file), got ${Array.isArray(value) ? 'a list' : typeof value}`,
        },
      ]),
    );
  }
  const structure = valueIssues(value);
  if (structure.length > 0) throw invalidRules(attach(file, structure));
  const issues: PathIssue[] = [];
  if (parsed.envoy) {
    const r = envoyDomainSchema.safeParse(value, { reportInput: true });
    if (!r.success) throw invalidRules(attach(file, zodIssues(r.error)));
    const domains = compileDomains([r.data], () => [], issues);
    if (issues.length > 0) throw invalidRules(attach(file, issues));
    return parts({}, domains);
  }
  const r = native.safeParse(value, { reportInput: true });
  if (!r.success) throw invalidRules(attach(file, zodIssues(r.error)));
  const domains = compileDomains(r.data.domains ?? [], (i) => ['domains', i], issues);
  if (issues.length > 0) throw invalidRules(attach(file, issues));
  const resources = Object.fromEntries(Object.entries(r.data.resources ?? {}).map(([n, res]) => [n, toResourceRule(res)]));
  const adaptive = toAdaptiveRules(r.data.adaptive, resources, issues);
  const quota = toQuotaRules(r.data.quota, resources, issues);
  if (issues.length > 0) throw invalidRules(attach(file, issues));
  return parts(resources, domains, toGovernanceRules(r.data.governance), adaptive, quota);
}

/**
 * Every resource the limiter needs for a rule set: its resources and the limits of each of its
 * envoy domains (named `envoy:...`, a prefix resource names in files cannot use).
 *
 * @example
 * store.watch((v) => limiter.setResources(limiterResources(v.ruleSet)));
 */
export function limiterResources(ruleSet: RuleSet): Readonly<Record<string, ResourceRule>> {
  const out: Record<string, ResourceRule> = { ...ruleSet.resources };
  for (const domain of Object.values(ruleSet.domains)) Object.assign(out, domain.resources());
  return Object.freeze(out);
}

/** One compiled file, for {@link mergeRuleSets}. */
export interface RuleFile {
  readonly file: string;
  readonly ruleSet: RuleSet;
}

/**
 * Merges compiled files into one rule set. Resource names, domain names and governance rule ids
 * must be unique across the files; a duplicate is reported in the file that repeats it, naming
 * the first.
 */
export function mergeRuleSets(files: readonly RuleFile[]): RuleSet {
  const resources: Record<string, ResourceRule> = {};
  const domains: Record<string, EnvoyDomain> = {};
  const resourceFile = new Map<string, string>();
  const domainFile = new Map<string, string>();
  const governance: Record<string, GovernanceRules[string]> = {};
  const ruleFile = new Map<string, string>();
  // An adaptive limit names a resource of its own file, so resource names keep them apart too.
  const adaptive: Record<string, AdaptiveRules[string]> = {};
  // Quota domains name resources of their own file too; a domain is defined in one file only.
  const quota: Record<string, QuotaRules[string]> = {};
  const quotaFile = new Map<string, string>();
  const issues: RuleIssue[] = [];
  for (const { file, ruleSet } of files) {
    for (const [name, rule] of Object.entries(ruleSet.resources)) {
      const first = resourceFile.get(name);
      if (first !== undefined) {
        issues.push({ file, path: formatPath(['resources', name]), message: `duplicate resource, already defined in ${first}` });
        continue;
      }
      resourceFile.set(name, file);
      resources[name] = rule;
    }
    for (const [name, domain] of Object.entries(ruleSet.domains)) {
      const first = domainFile.get(name);
      if (first !== undefined) {
        issues.push({ file, path: '', message: `duplicate domain '${name}', already defined in ${first}` });
        continue;
      }
      domainFile.set(name, file);
      domains[name] = domain;
    }
    for (const [id, rule] of Object.entries(ruleSet.governance)) {
      const first = ruleFile.get(id);
      if (first !== undefined) {
        issues.push({
          file,
          path: formatPath(['governance', 'rules', id]),
          message: `duplicate rule, already defined in ${first}`,
        });
        continue;
      }
      ruleFile.set(id, file);
      governance[id] = rule;
    }
    for (const [name, rule] of Object.entries(ruleSet.adaptive)) {
      if (resourceFile.get(name) === file) adaptive[name] = rule;
    }
    for (const [name, domain] of Object.entries(ruleSet.quota)) {
      const first = quotaFile.get(name);
      if (first !== undefined) {
        issues.push({ file, path: 'quota', message: `duplicate quota domain '${name}', already defined in ${first}` });
        continue;
      }
      quotaFile.set(name, file);
      quota[name] = domain;
    }
  }
  if (issues.length > 0) throw invalidRules(issues);
  return makeRuleSet(resources, domains, governance, adaptive, quota);
}
