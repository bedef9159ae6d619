import { createHash } from 'node:crypto';
import { RESOURCE_PATTERN, compileLimit, type LimitPolicy } from '@sluice/core';
import { coreIssue, type Path, type PathIssue } from '../issues.js';
import {
  ENVOY_UNITS,
  type EnvoyDescriptorInput,
  type EnvoyDomainInput,
  type EnvoyRateLimitInput,
  type EnvoyUnit,
} from './schema.js';

/** A `rate_limit` block, normalized: only what is set, units lower case. */
export interface EnvoyRateLimit {
  readonly unit?: EnvoyUnit;
  readonly requests_per_unit?: number;
  readonly unlimited?: true;
  readonly name?: string;
  readonly replaces?: readonly { readonly name: string }[];
}

/** A descriptor, normalized: empty values and false flags left out, lists kept in file order. */
export interface EnvoyDescriptor {
  readonly key: string;
  readonly value?: string;
  readonly rate_limit?: EnvoyRateLimit;
  readonly descriptors?: readonly EnvoyDescriptor[];
  readonly shadow_mode?: true;
  readonly quota_mode?: true;
  readonly detailed_metric?: true;
  readonly value_to_metric?: true;
  readonly share_threshold?: true;
  readonly metadata?: Readonly<Record<string, unknown>>;
}

/** What a configured `rate_limit` turns into. */
export interface LimitNode {
  /** envoy's `FullKey`: the domain and the configured path (`domain.key_value.key`). */
  readonly fullKey: string;
  /** The core resource holding this limit's policy. */
  readonly resource: string;
  /** `fixed-window`, `limit` = requests_per_unit, `windowMs` = the unit; none when unlimited. */
  readonly policy: LimitPolicy | undefined;
  readonly unit: EnvoyUnit | undefined;
  readonly requestsPerUnit: number | undefined;
  readonly unlimited: boolean;
  readonly shadow: boolean;
  readonly quota: boolean;
  readonly name: string | undefined;
  readonly replaces: readonly string[];
  readonly detailedMetric: boolean;
  readonly metadata: Readonly<Record<string, unknown>> | undefined;
}

/** A wildcard child, pre-split on `*` (envoy's `wildcardMatchEntry`). */
export interface WildcardEntry {
  readonly key: string;
  readonly parts: readonly string[];
}

/** One level of the descriptor tree (envoy's `rateLimitDescriptor`). */
export interface DescriptorNode {
  /** Children by composite key: `key` or `key_value` (patterns included, verbatim). */
  readonly children: ReadonlyMap<string, DescriptorNode>;
  /** Children whose composite key has a `*`, in file order: the first that matches wins. */
  readonly wildcards: readonly WildcardEntry[];
  readonly limit: LimitNode | undefined;
  readonly valueToMetric: boolean;
  readonly shareThreshold: boolean;
  /** With `share_threshold`: the composite key pattern (`key_files*`). */
  readonly wildcardPattern: string;
}

const PLAIN = /^[A-Za-z0-9_:@-]+$/;

/**
 * The core resource name of a configured limit, from its domain and the composite keys on its
 * path: `envoy:domain.key_value.key` when every part is plain (no '.', so the name splits back
 * into its parts), else a digest of the parts. Names are unique across all domains.
 */
export function limitResource(trail: readonly string[]): string {
  const readable = `envoy:${trail.join('.')}`;
  if (trail.every((p) => PLAIN.test(p)) && RESOURCE_PATTERN.test(readable)) return readable;
  // A readable name has no '/', so a digest name can never equal one.
  return `envoy:/${createHash('sha256').update(JSON.stringify(trail)).digest('hex').slice(0, 32)}`;
}

/** The window of a unit and requests_per_unit as a core policy; envoy counts in fixed windows. */
export function envoyPolicy(requestsPerUnit: number, unit: EnvoyUnit): LimitPolicy {
  return { algorithm: 'fixed-window', limit: requestsPerUnit, windowMs: ENVOY_UNITS[unit] };
}

function unitOf(raw: string): EnvoyUnit | undefined {
  const u = raw.toLowerCase();
  return Object.hasOwn(ENVOY_UNITS, u) ? (u as EnvoyUnit) : undefined;
}

interface Ctx {
  readonly issues: PathIssue[];
}

function compileRateLimit(
  rl: EnvoyRateLimitInput,
  d: EnvoyDescriptorInput,
  fullKey: string,
  trail: readonly string[],
  at: Path,
  ctx: Ctx,
): { node: LimitNode; normalized: EnvoyRateLimit } | undefined {
  const unlimited = rl.unlimited === true;
  const rawUnit = rl.unit ?? '';
  const unit = unitOf(rawUnit);
  let ok = true;
  const fail = (path: Path, message: string) => {
    ctx.issues.push({ path, message });
    ok = false;
  };
  if (unlimited) {
    // envoy rejects a valid unit next to unlimited; an invalid one is as much a mistake.
    if (rawUnit !== '') fail([...at, 'unit'], 'should not specify rate limit unit when unlimited');
  } else if (rawUnit === '') {
    fail([...at, 'unit'], 'is required (unless unlimited is true)');
  } else if (unit === undefined) {
    fail(
      [...at, 'unit'],
      `invalid rate limit unit ${JSON.stringify(rawUnit)}; expected one of ${Object.keys(ENVOY_UNITS).join(', ')}`,
    );
  }
  const rpu = rl.requests_per_unit ?? undefined;
  let policy: LimitPolicy | undefined;
  if (!unlimited) {
    if (rpu === undefined) fail([...at, 'requests_per_unit'], 'is required (unless unlimited is true)');
    else if (unit !== undefined) {
      policy = envoyPolicy(rpu, unit);
      const issue = coreIssue(() => compileLimit(policy!, 'p'), 'p.limit', [...at, 'requests_per_unit']);
      if (issue) fail(issue.path, issue.message);
    }
  }
  const name = rl.name ?? '';
  const replaces: string[] = [];
  (rl.replaces ?? []).forEach((r, i) => {
    const n = r.name ?? '';
    if (n === '') fail([...at, 'replaces', i, 'name'], 'should not have an empty replaces entry');
    else if (n === name) fail([...at, 'replaces', i, 'name'], 'replaces should not contain name of same descriptor');
    else replaces.push(n);
  });
  if (!ok) return undefined;
  const normalized: Record<string, unknown> = {};
  if (unlimited) normalized.unlimited = true;
  else {
    normalized.unit = unit;
    normalized.requests_per_unit = rpu;
  }
  if (name !== '') normalized.name = name;
  if (replaces.length > 0) normalized.replaces = Object.freeze(replaces.map((n) => Object.freeze({ name: n })));
  const node: LimitNode = Object.freeze({
    fullKey,
    resource: limitResource(trail),
    policy: policy && Object.freeze(policy),
    unit: unlimited ? undefined : unit,
    requestsPerUnit: unlimited ? undefined : rpu,
    unlimited,
    shadow: d.shadow_mode === true,
    quota: d.quota_mode === true,
    name: name === '' ? undefined : name,
    replaces: Object.freeze(replaces),
    detailedMetric: d.detailed_metric === true,
    metadata: d.metadata ? deepFreeze(structuredClone(d.metadata)) : undefined,
  });
  return { node, normalized: Object.freeze(normalized) };
}

function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null) {
    for (const x of Object.values(v)) deepFreeze(x);
    Object.freeze(v);
  }
  return v;
}

/**
 * Loads one level of descriptors as envoy's `loadDescriptors` does: composite key `key` or
 * `key_value`, duplicates rejected, patterns (any `*`) listed in file order for wildcard
 * matching, children loaded under `parentKey + compositeKey + '.'`.
 */
function loadDescriptors(
  list: readonly EnvoyDescriptorInput[],
  parentKey: string,
  trail: readonly string[],
  at: Path,
  ctx: Ctx,
): { children: Map<string, DescriptorNode>; wildcards: WildcardEntry[]; normalized: EnvoyDescriptor[] } {
  const children = new Map<string, DescriptorNode>();
  const wildcards: WildcardEntry[] = [];
  const normalized: EnvoyDescriptor[] = [];
  list.forEach((d, i) => {
    const here = [...at, i];
    const key = d.key ?? '';
    if (key === '') {
      ctx.issues.push({ path: [...here, 'key'], message: 'descriptor has empty key' });
      return;
    }
    const value = d.value ?? '';
    const composite = value === '' ? key : `${key}_${value}`;
    const fullKey = parentKey + composite;
    if (children.has(composite)) {
      ctx.issues.push({ path: here, message: `duplicate descriptor composite key '${fullKey}'` });
      return;
    }
    const path = [...trail, composite];
    const limit = d.rate_limit ? compileRateLimit(d.rate_limit, d, fullKey, path, [...here, 'rate_limit'], ctx) : undefined;
    const wild = composite.includes('*');
    if (d.share_threshold === true && !wild) {
      ctx.issues.push({
        path: [...here, 'share_threshold'],
        message: `share_threshold can only be used with wildcard values (containing '*'), but found key '${composite}'`,
      });
    }
    const sub = loadDescriptors(d.descriptors ?? [], `${fullKey}.`, path, [...here, 'descriptors'], ctx);
    if (wild) wildcards.push(Object.freeze({ key: composite, parts: Object.freeze(composite.split('*')) }));
    children.set(
      composite,
      Object.freeze({
        children: sub.children,
        wildcards: Object.freeze(sub.wildcards),
        limit: limit?.node,
        valueToMetric: d.value_to_metric === true,
        shareThreshold: d.share_threshold === true,
        wildcardPattern: d.share_threshold === true && wild ? composite : '',
      }),
    );
    const n: Record<string, unknown> = { key };
    if (value !== '') n.value = value;
    if (limit) n.rate_limit = limit.normalized;
    for (const f of ['shadow_mode', 'quota_mode', 'detailed_metric', 'value_to_metric', 'share_threshold'] as const) {
      if (d[f] === true) n[f] = true;
    }
    if (d.metadata) n.metadata = deepFreeze(structuredClone(d.metadata));
    if (sub.normalized.length > 0) n.descriptors = Object.freeze(sub.normalized);
    normalized.push(Object.freeze(n) as unknown as EnvoyDescriptor);
  });
  return { children, wildcards, normalized };
}

/** A domain's descriptor tree and its normalized descriptors. */
export interface CompiledDomain {
  readonly domain: string;
  readonly root: DescriptorNode;
  readonly descriptors: readonly EnvoyDescriptor[];
}

/**
 * Compiles a validated envoy domain. Issues are located under `at` (the domain's place in its
 * file); nothing is returned when there are any.
 */
export function compileDomain(input: EnvoyDomainInput, at: Path, issues: PathIssue[]): CompiledDomain | undefined {
  const ctx: Ctx = { issues: [] };
  if (input.domain === '') ctx.issues.push({ path: [...at, 'domain'], message: 'config file cannot have empty domain' });
  const top = loadDescriptors(input.descriptors ?? [], `${input.domain}.`, [input.domain], [...at, 'descriptors'], ctx);
  issues.push(...ctx.issues);
  if (ctx.issues.length > 0) return undefined;
  const root: DescriptorNode = Object.freeze({
    children: top.children,
    wildcards: Object.freeze(top.wildcards),
    limit: undefined,
    valueToMetric: false,
    shareThreshold: false,
    wildcardPattern: '',
  });
  return Object.freeze({ domain: input.domain, root, descriptors: Object.freeze(top.normalized) });
}
