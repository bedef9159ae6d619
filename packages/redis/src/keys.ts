import calculateSlot from 'cluster-key-slot';

/**
 * Redis names of one Sluice key's data. All three carry the same hash tag, so they live in one
 * Cluster slot and one script call may touch them together.
 */
export interface KeyNames {
  /** STRING: the key's limit states. */
  readonly state: string;
  /** ZSET: concurrency permit id -> expiry. */
  readonly permits: string;
  /** HASH: concurrency permit id -> cost. */
  readonly costs: string;
}

/**
 * The hash tag for a Sluice key. Redis hashes what lies between the first `{` and the next `}`,
 * and the whole name when that is empty, so `}` is escaped (and `%`, to keep the mapping
 * one-to-one) and the empty key gets a tag no other key can produce.
 */
export function hashTag(key: string): string {
  if (key === '') return '{%}';
  if (!key.includes('%') && !key.includes('}')) return `{${key}}`;
  return `{${key.replaceAll('%', '%25').replaceAll('}', '%7D')}}`;
}

/** The name of a Sluice key's state under `prefix`; the other names derive from it. */
export function stateKey(prefix: string, key: string): string {
  return `${prefix}${hashTag(key)}`;
}

/** The names of a Sluice key's data, from the name of its state. */
export function namesOf(state: string): KeyNames {
  return { state, permits: `${state}:l`, costs: `${state}:c` };
}

/** The names of a Sluice key's data under `prefix`. */
export function keyNames(prefix: string, key: string): KeyNames {
  return namesOf(stateKey(prefix, key));
}

/** The Redis Cluster slot (0..16383) of a Redis key name. */
export function slotOf(name: string): number {
  return calculateSlot(name);
}
