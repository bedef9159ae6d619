/**
 * Storage keys: the names the limiter gives the state it keeps in a store. They are encodings,
 * not concatenations: each kind of state has a namespace of its own, so two calls that must be
 * counted apart can never name the same state, whatever their keys contain.
 *
 * | state                                 | storage key             |
 * | ------------------------------------- | ----------------------- |
 * | a resource's own limits (no key)      | `resource`              |
 * | a caller key                          | `resource\|key`         |
 * | a tenant's quota                      | `resource\|@tenant`     |
 * | share `i` of a split resource         | `resource\|#i`          |
 * | share `i` of a split caller key       | `resource\|#i\|key`     |
 * | the boost pool (no key)               | `resource\|#b`          |
 * | the boost pool of a caller key        | `resource\|#b\|key`     |
 *
 * Resource names cannot contain `|` (`RESOURCE_PATTERN`), so the first `|` ends the resource, and
 * the character after it names the kind: `@` a tenant, `#` a share, anything else a caller key.
 * A caller key that starts with one of the markers `@`, `#` or the escape `%` is stored with a
 * `%` in front (`@acme` as `%@acme`, `%x` as `%%x`); every other key is stored as it is, so the
 * state of ordinary keys keeps its name across versions.
 */

/** The first characters of a caller key that are escaped: the kind markers and the escape. */
const MARKED = /^[@#%]/;

/** A caller key as it appears in a storage key. */
export function escapeKey(key: string): string {
  return MARKED.test(key) ? `%${key}` : key;
}

/** The caller key that {@link escapeKey} turned into `escaped`. */
export function unescapeKey(escaped: string): string {
  return escaped.startsWith('%') ? escaped.slice(1) : escaped;
}

/** Where the limits of `resource` are kept for caller key `key` ('' for the resource as a whole). */
export function resourceKey(resource: string, key: string): string {
  return key === '' ? resource : `${resource}|${escapeKey(key)}`;
}

/** Where the quota of `tenant` within `resource` is kept (tenant names cannot contain `|`). */
export function tenantKey(resource: string, tenant: string): string {
  return `${resource}|@${tenant}`;
}

/** Where share `part` of a split resource's limits is kept for caller key `key`. */
export function splitKey(resource: string, key: string, part: number): string {
  return key === '' ? `${resource}|#${part}` : `${resource}|#${part}|${escapeKey(key)}`;
}

/**
 * Where the boost pool of `resource` is kept for caller key `key`. `#` followed by a letter is a
 * namespace no share uses (their `#` is followed by digits).
 */
export function boostKey(resource: string, key: string): string {
  return key === '' ? `${resource}|#b` : `${resource}|#b|${escapeKey(key)}`;
}

/** The parts a storage key was made of (the inverse of the functions above). */
export interface StorageKeyParts {
  readonly resource: string;
  /** The caller key ('' for the resource as a whole, and for a tenant's quota). */
  readonly key: string;
  readonly tenant?: string;
  /** The share of a split resource. */
  readonly part?: number;
  /** `boost`: the resource's boost pool for the caller key. */
  readonly pool?: 'boost';
}

/** The storage key `parts` name: the encoder of the kind they describe (see the table above). */
export function storageKey(parts: StorageKeyParts): string {
  if (parts.tenant !== undefined) return tenantKey(parts.resource, parts.tenant);
  if (parts.part !== undefined) return splitKey(parts.resource, parts.key, parts.part);
  if (parts.pool === 'boost') return boostKey(parts.resource, parts.key);
  return resourceKey(parts.resource, parts.key);
}

/**
 * True if `s` holds a UTF-16 surrogate without its pair. Such a string has no UTF-8 form: Redis,
 * HTTP and gRPC would all carry it as U+FFFD, so distinct lone surrogates would share one state.
 */
export function hasLoneSurrogate(s: string): boolean {
  // Native, and at once for a string of one-byte characters (which holds no surrogate): a fifth
  // of the time a `u` regular expression took on a new key of 40 characters (16 ns against 82).
  return !s.isWellFormed();
}
