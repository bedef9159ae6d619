import { createHash } from 'node:crypto';
import type { ResourceRule } from '../native.js';
import {
  envoyPolicy,
  type CompiledDomain,
  type DescriptorNode,
  type EnvoyDescriptor,
  type LimitNode,
  type WildcardEntry,
} from './compile.js';
import type { EnvoyUnit } from './schema.js';

/** One `key=value` entry of a request's descriptor. An empty value is allowed. */
export interface DescriptorEntry {
  readonly key: string;
  readonly value: string;
}

/** A limit carried by the request itself (envoy's `RateLimitDescriptor.limit`). */
export interface LimitOverride {
  readonly requestsPerUnit: number;
  readonly unit: EnvoyUnit;
}

/** One descriptor of a request: its entries, outermost first, and an optional override. */
export interface RequestDescriptor {
  readonly entries: readonly DescriptorEntry[];
  readonly limit?: LimitOverride;
}

/**
 * The limit that applies to one request descriptor: the configured limit's settings (see
 * {@link LimitNode}; its `resource` holds the policy, one per configured `rate_limit`), plus
 * where this request counts.
 */
export interface MatchedLimit extends Omit<LimitNode, 'fullKey'> {
  readonly domain: string;
  /**
   * The bucket within the resource: the domain and every entry of the request with the
   * request's own values, so a key-only or wildcard descriptor counts each value on its own,
   * as envoy's cache keys do (except entries matched under `share_threshold`, which count
   * under the pattern). Unambiguous: `%`, `|` and `=` inside names are percent-encoded.
   */
  readonly key: string;
  /** envoy's stats key (`RateLimit.FullKey`) for this match. */
  readonly statsKey: string;
}

/**
 * envoy's `wildcardMatch`: `parts` is a pattern split on `*`; each `*` matches any run of
 * characters, possibly empty, and the literal parts must appear in order.
 */
export function wildcardMatch(parts: readonly string[], value: string): boolean {
  if (parts.length === 1) return parts[0] === value;
  const first = parts[0]!;
  const last = parts[parts.length - 1]!;
  if (!value.startsWith(first) || !value.endsWith(last)) return false;
  if (value.length < parts.reduce((n, p) => n + p.length, 0)) return false;
  let remaining = value.slice(first.length, value.length - last.length);
  for (const part of parts.slice(1, -1)) {
    const idx = remaining.indexOf(part);
    if (idx < 0) return false;
    remaining = remaining.slice(idx + part.length);
  }
  return true;
}

const enc = (s: string) => s.replace(/[%|=]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

function bucketKey(domain: string, entries: readonly DescriptorEntry[], patterns: ReadonlyMap<number, string>): string {
  return [enc(domain), ...entries.map((e, i) => `${enc(e.key)}=${enc(patterns.get(i) ?? e.value)}`)].join('|');
}

/** envoy's `descriptorKey`: `domain.key_value.key2` (an empty value leaves out `_value`). */
function descriptorKey(domain: string, entries: readonly DescriptorEntry[]): string {
  return `${domain}.${entries.map((e) => (e.value === '' ? e.key : `${e.key}_${e.value}`)).join('.')}`;
}

function matched(domain: string, limit: LimitNode, key: string, statsKey: string): MatchedLimit {
  const { fullKey: _fullKey, ...settings } = limit;
  return Object.freeze({ ...settings, domain, key, statsKey });
}

/**
 * Names of the resources that limit overrides count under start with this: one per domain,
 * unit and `requests_per_unit`, so the same override always counts under the same name.
 */
export const OVERRIDE_RESOURCE_PREFIX = 'envoy:/override/';

function overrideMatch(domain: string, entries: readonly DescriptorEntry[], o: LimitOverride): MatchedLimit {
  const id = createHash('sha256')
    .update(JSON.stringify([domain, { override: [o.unit, o.requestsPerUnit] }]))
    .digest('hex');
  return Object.freeze({
    domain,
    resource: `${OVERRIDE_RESOURCE_PREFIX}${id.slice(0, 32)}`,
    key: bucketKey(domain, entries, new Map()),
    statsKey: descriptorKey(domain, entries),
    policy: Object.freeze(envoyPolicy(o.requestsPerUnit, o.unit)),
    unit: o.unit,
    requestsPerUnit: o.requestsPerUnit,
    unlimited: false,
    shadow: false,
    quota: false,
    name: undefined,
    replaces: Object.freeze([]),
    detailedMetric: false,
    metadata: undefined,
  });
}

/**
 * The compiled descriptors of one envoy domain. Matching follows envoyproxy/ratelimit's
 * `GetLimit` (src/config/config_impl.go) step by step; see {@link matchDescriptor}.
 */
export class EnvoyDomain {
  readonly domain: string;
  /** The descriptors as loaded (normalized), for display, diff and hashing. */
  readonly descriptors: readonly EnvoyDescriptor[];
  readonly #root: DescriptorNode;

  constructor(compiled: CompiledDomain) {
    this.domain = compiled.domain;
    this.descriptors = compiled.descriptors;
    this.#root = compiled.root;
    Object.freeze(this);
  }

  /**
   * Every configured limit (unlimited ones left out) as a core resource of one fixed-window
   * limit, keyed by {@link MatchedLimit.resource}: register these with the limiter, then
   * decide each match with `limiter.try(match.resource, { key: match.key })`.
   */
  resources(): Readonly<Record<string, ResourceRule>> {
    const out: Record<string, ResourceRule> = {};
    const walk = (node: DescriptorNode) => {
      for (const child of node.children.values()) {
        const l = child.limit;
        if (l?.policy) out[l.resource] = Object.freeze({ limits: Object.freeze([l.policy]), shadow: l.shadow });
        walk(child);
      }
    };
    walk(this.#root);
    return Object.freeze(out);
  }

  /** See {@link matchDescriptor}. */
  match(entries: readonly DescriptorEntry[], override?: LimitOverride): MatchedLimit | undefined {
    if (override) return overrideMatch(this.domain, entries, override);
    const domain = this.domain;
    let level = this.#root.children;
    let prev: DescriptorNode = this.#root;
    let detailedKey = domain;
    let valueToMetricKey = domain;
    const patterns = new Map<number, string>();
    let found: LimitNode | undefined;
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i]!;
      let finalKey = `${entry.key}_${entry.value}`;
      detailedKey += `.${finalKey}`;
      let next = level.get(finalKey);
      let wildcardKey = '';
      if (next === undefined) {
        const hit = prev.wildcards.find((w: WildcardEntry) => wildcardMatch(w.parts, finalKey));
        if (hit) {
          next = level.get(hit.key);
          wildcardKey = hit.key;
        }
      }
      const matchedUsingValue = next !== undefined;
      if (next === undefined) {
        finalKey = entry.key;
        next = level.get(finalKey);
      }
      if (wildcardKey !== '' && next?.shareThreshold && next.wildcardPattern !== '') {
        patterns.set(i, trimPrefix(next.wildcardPattern, `${entry.key}_`));
      }
      valueToMetricKey += '.';
      if (next !== undefined) {
        let use = '';
        if (wildcardKey !== '') {
          use = patterns.get(i) ?? (next.valueToMetric ? entry.value : trimPrefix(wildcardKey, `${entry.key}_`));
        } else if (matchedUsingValue) use = entry.value;
        else if (next.valueToMetric) use = entry.value;
        valueToMetricKey += use === '' ? entry.key : `${entry.key}_${use}`;
      } else {
        valueToMetricKey += entry.key;
      }
      // A limit applies only when the configured path is exactly as deep as the request.
      if (next?.limit && i === entries.length - 1) found = next.limit;
      if (next === undefined || next.children.size === 0) break;
      level = next.children;
      prev = next;
    }
    if (!found) return undefined;
    let statsKey: string;
    if (found.detailedMetric) {
      statsKey =
        patterns.size > 0
          ? [domain, ...entries.map((e, i) => (patterns.has(i) ? `${e.key}_${patterns.get(i)}` : descriptorKeyPart(e)))].join('.')
          : detailedKey;
    } else {
      statsKey = valueToMetricKey;
    }
    return matched(domain, found, bucketKey(domain, entries, patterns), statsKey);
  }

  /** See {@link matchDescriptors}. */
  matchAll(descriptors: readonly RequestDescriptor[]): (MatchedLimit | undefined)[] {
    return matchDescriptors(this, descriptors);
  }

  /** The normalized descriptors, so a domain serializes as it was loaded. */
  toJSON(): { domain: string; descriptors: readonly EnvoyDescriptor[] } {
    return { domain: this.domain, descriptors: this.descriptors };
  }
}

function descriptorKeyPart(e: DescriptorEntry): string {
  return e.value === '' ? e.key : `${e.key}_${e.value}`;
}

function trimPrefix(s: string, prefix: string): string {
  return s.startsWith(prefix) ? s.slice(prefix.length) : s;
}

/**
 * The limit for one request descriptor, as envoyproxy/ratelimit's `GetLimit` finds it: walking
 * the entries level by level, each is looked up as `key_value` (exact), then against the
 * level's wildcard patterns in file order (`*` anywhere, matched on `key_value`), then as `key`
 * alone (any value). The limit found at the request's last entry applies; a request deeper or
 * shallower than the configured limit matches nothing. With `override` (a limit sent in the
 * request), that limit applies to the whole descriptor instead.
 */
export function matchDescriptor(
  domain: EnvoyDomain,
  entries: readonly DescriptorEntry[],
  override?: LimitOverride,
): MatchedLimit | undefined {
  return domain.match(entries, override);
}

/**
 * The limits for all of a request's descriptors, as envoyproxy/ratelimit's
 * `constructLimitsToCheck` (src/service/ratelimit.go) builds them: every matched limit's
 * `replaces` is collected first (unlimited ones included); then each named limit whose name is
 * being replaced is dropped (`undefined`). Unlimited limits are never dropped: they stay in the
 * result with `unlimited: true`, and the descriptor is answered OK without being counted.
 */
export function matchDescriptors(domain: EnvoyDomain, descriptors: readonly RequestDescriptor[]): (MatchedLimit | undefined)[] {
  const limits = descriptors.map((d) => domain.match(d.entries, d.limit));
  const replacing = new Set<string>();
  for (const l of limits) for (const r of l?.replaces ?? []) replacing.add(r);
  return limits.map((l) => (l === undefined || l.unlimited || l.name === undefined || !replacing.has(l.name) ? l : undefined));
}
