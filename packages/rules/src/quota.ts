import { ALGORITHM_TRAITS } from '@sluice/core';
import { z } from 'zod';
import { wildcardMatch } from './envoy/match.js';
import type { Path, PathIssue } from './issues.js';
import type { ResourceRule } from './native.js';

/**
 * The `quota` section of a rule file: which resource each bucket of Envoy's rate limit quota
 * service (RLQS) draws on. A data plane names a bucket by a map of strings (`BucketId`) within a
 * domain (the stream's); the first entry of the domain whose `bucket` has the same keys, each
 * value matching, gives the bucket's resource.
 *
 * ```yaml
 * quota:
 *   - domain: gateway
 *     buckets:
 *       - bucket: { name: checkout }            # exactly this value
 *         resource: api:checkout
 *       - bucket: { name: search, user: '*' }   # any user: all of them share one budget
 *         resource: api:search
 *       - bucket: { name: upload, user: '*' }
 *         perValue: [user]                      # each user its own key of the resource
 *         resource: api:upload
 * ```
 *
 * A value is matched as envoy's descriptors match theirs: `*` stands for any run of characters.
 */

/** Bounds of the section, so that matching a bucket stays cheap whatever the file holds. */
export const QUOTA_BOUNDS = Object.freeze({
  maxDomains: 100,
  maxBuckets: 1000,
  maxPairs: 10,
  maxKeyLength: 128,
  maxValueLength: 256,
});

/** One entry of a domain: the buckets it matches and the resource they draw on. */
export interface QuotaBucketRule {
  /** Key -> value pattern; a bucket matches with exactly these keys, each value matching. */
  readonly bucket: Readonly<Record<string, string>>;
  /** A resource of the same file: the budget the matched buckets' assignments are taken from. */
  readonly resource: string;
  /** Keys whose value gives each bucket its own key of the resource, sorted. @default none: one key */
  readonly perValue: readonly string[];
}

/** The buckets of one domain, in the order they are tried. */
export interface QuotaDomain {
  readonly domain: string;
  readonly buckets: readonly QuotaBucketRule[];
}

/** Domain name -> its bucket rules. */
export type QuotaRules = Readonly<Record<string, QuotaDomain>>;

const pairKey = z.string().min(1).max(QUOTA_BOUNDS.maxKeyLength);
const pairValue = z.string().min(1).max(QUOTA_BOUNDS.maxValueLength);

const bucketSchema = z
  .strictObject({
    bucket: z
      .record(pairKey, pairValue)
      .refine((b) => Object.keys(b).length >= 1 && Object.keys(b).length <= QUOTA_BOUNDS.maxPairs, {
        message: `must have 1 to ${QUOTA_BOUNDS.maxPairs} pairs`,
      }),
    resource: z.string().min(1),
    perValue: z.array(pairKey).max(QUOTA_BOUNDS.maxPairs).optional(),
  })
  .superRefine((b, ctx) => {
    (b.perValue ?? []).forEach((k, i) => {
      if (!Object.hasOwn(b.bucket, k)) ctx.addIssue({ code: 'custom', path: ['perValue', i], message: 'is not a key of bucket' });
    });
  });

/** The schema of the `quota` section (shape and bounds; resources are checked apart). */
export const quotaSchema = z
  .array(
    z.strictObject({
      domain: z.string().min(1).max(QUOTA_BOUNDS.maxKeyLength),
      buckets: z.array(bucketSchema).min(1),
    }),
  )
  .max(QUOTA_BOUNDS.maxDomains);

type QuotaInput = z.infer<typeof quotaSchema>;

/** Why a resource cannot back assignments (they are taken as reservations), or undefined. */
function unreservable(r: ResourceRule): string | undefined {
  const why = r.limits.some((l) => ALGORITHM_TRAITS[l.algorithm]?.rate === false)
    ? 'it has a concurrency limit'
    : r.split !== undefined && r.split > 1
      ? 'it is split'
      : r.priority !== undefined
        ? 'it has a core share or tiers'
        : r.boost !== undefined
          ? 'it has a boost pool'
          : undefined;
  return why === undefined ? undefined : `cannot back assignments (they are reserved ahead, as leases are): ${why}`;
}

/**
 * Checks each domain against the resources of the same file and freezes it. A bucket's
 * resource must exist there and be one whose permits can be reserved ahead (no concurrency
 * limit, no split, no core share, no boost pool): assignments are drawn from it as leases are.
 */
export function toQuotaRules(
  input: QuotaInput | undefined,
  resources: Readonly<Record<string, ResourceRule>>,
  issues: PathIssue[],
): QuotaRules {
  const out: Record<string, QuotaDomain> = {};
  let total = 0;
  (input ?? []).forEach((d, i) => {
    const at: Path = ['quota', i];
    if (Object.hasOwn(out, d.domain)) {
      issues.push({ path: [...at, 'domain'], message: `duplicate domain '${d.domain}'` });
      return;
    }
    total += d.buckets.length;
    if (total > QUOTA_BOUNDS.maxBuckets) {
      issues.push({ path: [...at, 'buckets'], message: `at most ${QUOTA_BOUNDS.maxBuckets} buckets over all domains` });
      return;
    }
    const buckets: QuotaBucketRule[] = [];
    d.buckets.forEach((b, j) => {
      const resource = resources[b.resource];
      const why = resource === undefined ? 'is not a resource of this file' : unreservable(resource);
      if (why !== undefined) {
        issues.push({ path: [...at, 'buckets', j, 'resource'], message: why });
        return;
      }
      buckets.push(
        Object.freeze({
          bucket: Object.freeze({ ...b.bucket }),
          resource: b.resource,
          perValue: Object.freeze([...new Set(b.perValue ?? [])].sort()),
        }),
      );
    });
    out[d.domain] = Object.freeze({ domain: d.domain, buckets: Object.freeze(buckets) });
  });
  return Object.freeze(out);
}

/** Where a bucket's assignments are drawn from: a resource and a key of it. */
export interface QuotaMatch {
  readonly resource: string;
  /** The key within the resource: '' unless the entry has `perValue` keys. */
  readonly key: string;
  /** The position of the matching entry in its domain. */
  readonly entry: number;
}

const enc = (s: string) => `${s.length}:${s}`;

/**
 * The resource and key a bucket of `domain` draws on: the first entry whose `bucket` has the
 * bucket's keys (no more, no fewer), each value matching; undefined when none does. The key is
 * the `perValue` pairs, each part length-prefixed (no two buckets share a key by accident).
 */
export function matchQuotaBucket(
  rules: QuotaRules,
  domain: string,
  bucket: Readonly<Record<string, string>>,
): QuotaMatch | undefined {
  const d = Object.hasOwn(rules, domain) ? rules[domain] : undefined;
  if (d === undefined) return undefined;
  const keys = Object.keys(bucket);
  for (let i = 0; i < d.buckets.length; i++) {
    const rule = d.buckets[i]!;
    const patterns = Object.keys(rule.bucket);
    if (patterns.length !== keys.length) continue;
    const all = patterns.every((k) => Object.hasOwn(bucket, k) && wildcardMatch(rule.bucket[k]!.split('*'), bucket[k]!));
    if (!all) continue;
    const key = rule.perValue.map((k) => `${enc(k)}${enc(bucket[k]!)}`).join('');
    return { resource: rule.resource, key, entry: i };
  }
  return undefined;
}
