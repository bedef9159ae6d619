/**
 * Which keys a rule rollout gives the new version: a key's place in the split is a stable hash
 * of (salt, resource, key), so every server and every client that knows the rollout puts a key
 * in the same cohort without asking anyone, and a key stays in its cohort while the share grows.
 */

/** The hash's buckets: a rollout share is given in basis points of them (0.01 %). */
export const COHORT_BUCKETS = 10_000;

/** A rollout's two groups of keys: the version in force, and the one being rolled out. */
export type Cohort = 'baseline' | 'candidate';

/** 32-bit FNV-1a over the UTF-16 code units of `s`, continuing from `h`. */
function fnv1a(s: string, h: number): number {
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h;
}

/**
 * The bucket (0 .. {@link COHORT_BUCKETS} - 1) of `key` of `resource` in the rollout `salt`
 * (the rollout's id: each rollout picks its own keys first). FNV-1a with murmur3's finalizer:
 * no I/O, the same in Node, browsers and workflow sandboxes.
 */
export function cohortBucket(salt: string, resource: string, key = ''): number {
  // Lengths are mixed in so that ("ab", "c") and ("a", "bc") hash apart.
  let h = fnv1a(`${salt.length}:${salt}|${resource.length}:${resource}|${key}`, 0x811c9dc5);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return (h >>> 0) % COHORT_BUCKETS;
}

/**
 * The cohort of `key` when `percent` (0..100) of keys get the candidate: bucket < percent of
 * the buckets. A key in the candidate cohort at p % is in it at every share above p.
 */
export function cohortAt(percent: number, salt: string, resource: string, key?: string): Cohort {
  return cohortBucket(salt, resource, key) < Math.round(percent * (COHORT_BUCKETS / 100)) ? 'candidate' : 'baseline';
}
