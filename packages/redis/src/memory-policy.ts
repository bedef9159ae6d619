import type { Cluster, Redis } from 'ioredis';

/** How one Redis server bounds its memory (`CONFIG GET maxmemory maxmemory-policy`). */
export interface MemoryPolicy {
  /** `host:port` of the server (a Cluster's masters each have their own). */
  readonly node: string;
  /** `maxmemory` in bytes; 0: none. */
  readonly maxmemory: number;
  /** `maxmemory-policy`, e.g. `noeviction`. */
  readonly policy: string;
}

/**
 * The memory policy of every server that holds keys: the standalone server, or each master of a
 * Cluster. Rejects when `CONFIG` is refused (managed services often rename or disable it).
 */
export async function readMemoryPolicy(client: Redis | Cluster): Promise<MemoryPolicy[]> {
  const servers: Redis[] = client.isCluster ? (client as Cluster).nodes('master') : [client as Redis];
  return Promise.all(
    servers.map(async (server) => {
      const reply = (await server.config('GET', 'maxmemory', 'maxmemory-policy')) as string[];
      const value = (name: string) => reply[reply.indexOf(name) + 1] ?? '';
      return {
        node: `${server.options.host ?? ''}:${server.options.port ?? ''}`,
        maxmemory: Number(value('maxmemory')),
        policy: value('maxmemory-policy'),
      };
    }),
  );
}

/**
 * What is wrong with a server's memory policy for limit state, or undefined when nothing is.
 * Every key Sluice writes has a TTL, so any evicting policy (`allkeys-*` and `volatile-*` alike)
 * may drop a key that still counts: that key starts afresh and its callers can exceed the limit.
 * Only `noeviction` with a `maxmemory` both bounds memory and keeps live state: when full, writes
 * fail, and the store-failure policy decides until there is room.
 */
export function memoryPolicyProblem(p: MemoryPolicy): string | undefined {
  if (p.policy !== 'noeviction') {
    return `Redis ${p.node} has maxmemory-policy ${p.policy}: it may evict live limit state, and an evicted key starts afresh (its callers can exceed the limit); set maxmemory-policy noeviction`;
  }
  if (p.maxmemory === 0) {
    return `Redis ${p.node} has no maxmemory: a flood of new keys grows its memory without bound (each key lives until its window ends); set maxmemory (with maxmemory-policy noeviction)`;
  }
  return undefined;
}
