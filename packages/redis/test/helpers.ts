import { Cluster, Redis } from 'ioredis';
import { RedisStore, type RedisStoreOptions } from '../src/index.js';
import { randomPrefix, redisClusterNodes, redisUrl } from '../../../test/env.js';

export { clearOfWindowEnd } from '../../../test/wait-for.js';

/** A seeded PRNG (mulberry32): the same seed replays the same test. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The seed for randomized tests: SLUICE_SEED when set, else a fresh one (printed by callers). */
export function testSeed(): number {
  const fromEnv = process.env.SLUICE_SEED;
  return fromEnv ? Number(fromEnv) : Math.floor(Math.random() * 2 ** 31);
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The call bound of the stores the helpers make. These tests check what the store decides, not
 * how fast: a loaded machine (or a cluster client's first connection) may take longer than the
 * default 50 ms. Tests of timing pass their own bound.
 */
export const TEST_COMMAND_TIMEOUT_MS = 5000;

/** Where a test's stores point: standalone or cluster, under a fresh prefix. */
export interface Target {
  readonly name: string;
  readonly prefix: string;
  store(options?: Partial<RedisStoreOptions>): RedisStore;
  /** A plain client for inspecting and cleaning up (the caller closes it). */
  admin(): Redis | Cluster;
}

export function standalone(label = 't'): Target {
  const prefix = randomPrefix(label);
  return {
    name: 'standalone',
    prefix,
    store: (options = {}) => new RedisStore({ url: redisUrl(), prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS, ...options }),
    admin: () => new Redis(redisUrl()),
  };
}

export function cluster(label = 't'): Target {
  const prefix = randomPrefix(label);
  return {
    name: 'cluster',
    prefix,
    store: (options = {}) =>
      new RedisStore({ clusterNodes: redisClusterNodes(), prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS, ...options }),
    admin: () => new Cluster(redisClusterNodes()),
  };
}

/** Every key under `prefix`, on every master. */
export async function keysUnder(admin: Redis | Cluster, prefix: string): Promise<string[]> {
  const nodes = admin instanceof Cluster ? admin.nodes('master') : [admin];
  const found: string[] = [];
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      found.push(...keys);
    } while (cursor !== '0');
  }
  return found;
}

/** Deletes every key under `prefix` and closes the admin client. */
export async function cleanUp(admin: Redis | Cluster, prefix: string): Promise<void> {
  try {
    for (const key of await keysUnder(admin, prefix)) await admin.del(key);
  } finally {
    admin.disconnect();
  }
}
