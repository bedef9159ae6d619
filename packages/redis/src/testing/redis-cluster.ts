import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { RedisServer, trackForStopAll } from './redis-server.js';

/** A Redis Cluster of masters without replicas, started by {@link startRedisCluster}. */
export interface RedisCluster {
  /** `host:port` of every master, in slot order (the first holds slots 0..). */
  readonly nodes: readonly string[];
  /** The slots each master serves, `[first, last]`, in the order of `nodes`. */
  readonly slots: readonly (readonly [number, number])[];
  /** The masters, in the order of `nodes`: each can be killed, frozen or restarted alone. */
  readonly servers: readonly RedisServer[];
  /** Stops every master and removes the node files. */
  stop(): Promise<void>;
}

/** How {@link startRedisCluster} starts a cluster. */
export interface RedisClusterOptions {
  /** How long the cluster may take to report ok on every node, ms. @default 10000 */
  readonly startTimeoutMs?: number;
}

/** True if nothing listens on the port (binding it succeeds); false on any bind error. */
async function portFree(port: number): Promise<boolean> {
  const server = createServer();
  const ok = await new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false));
    server.once('listening', () => resolve(true));
    server.listen(port, '127.0.0.1');
  });
  if (ok) {
    server.close();
    await once(server, 'close');
  }
  return ok;
}

/**
 * A free port whose cluster bus port (port + 10000) is free too. Both lie below the kernel's
 * ephemeral range (32768 and up on Linux), so an outgoing connection cannot take either between
 * this check and the server binding it.
 */
async function freeClusterPort(taken: readonly number[]): Promise<number> {
  for (let i = 0; i < 100; i++) {
    const port = 11_000 + Math.floor(Math.random() * 11_000);
    if (taken.includes(port) || taken.includes(port + 10_000) || taken.includes(port - 10_000)) continue;
    if ((await portFree(port)) && (await portFree(port + 10_000))) return port;
  }
  throw new Error('could not find free ports for a Redis Cluster');
}

const CLUSTER_SLOTS = 16_384;

/**
 * Starts `masters` cluster-enabled {@link RedisServer}s on free loopback ports (no replicas, no
 * persistence, node files in a temporary directory), gives each an equal range of slots, joins
 * them and waits until every node reports the cluster ok.
 */
export async function startRedisCluster(masters: number, options: RedisClusterOptions = {}): Promise<RedisCluster> {
  if (!Number.isInteger(masters) || masters < 1) throw new RangeError(`masters must be a whole number >= 1, got ${masters}`);
  const dir = await mkdtemp(join(tmpdir(), 'sluice-redis-cluster-'));
  const servers: RedisServer[] = [];
  const clients: Redis[] = [];
  const stop = async (): Promise<void> => {
    for (const c of clients) c.disconnect();
    await Promise.all(servers.map((s) => s.stop()));
    await rm(dir, { recursive: true, force: true });
    untrack();
  };
  // Also stopped (and its directory removed) by stopAllRedisServers.
  const untrack = trackForStopAll(stop);
  try {
    const ports: number[] = [];
    const slots: [number, number][] = [];
    for (let i = 0; i < masters; i++) {
      const port = await freeClusterPort(ports);
      ports.push(port);
      servers.push(
        await RedisServer.start({
          port,
          args: ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`), '--dir', dir],
        }),
      );
    }
    for (const port of ports) {
      const client = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 1 });
      await client.connect();
      clients.push(client);
    }
    for (const [i, client] of clients.entries()) {
      const from = Math.floor((CLUSTER_SLOTS * i) / masters);
      const to = Math.floor((CLUSTER_SLOTS * (i + 1)) / masters) - 1;
      slots.push([from, to]);
      await client.call('CLUSTER', 'ADDSLOTSRANGE', String(from), String(to));
    }
    for (const port of ports.slice(1)) await clients[0]!.call('CLUSTER', 'MEET', '127.0.0.1', String(port));
    const deadline = performance.now() + (options.startTimeoutMs ?? 10_000);
    for (;;) {
      const infos = await Promise.all(clients.map((c) => c.call('CLUSTER', 'INFO') as Promise<string>));
      const ok = infos.every(
        (info) => /cluster_state:ok/.test(info) && new RegExp(`cluster_known_nodes:${masters}\\b`).test(info),
      );
      if (ok) break;
      if (performance.now() > deadline) throw new Error(`the Redis Cluster on ports ${ports.join(', ')} did not become ok`);
      await sleep(50);
    }
    for (const c of clients) c.disconnect();
    clients.length = 0;
    return { nodes: ports.map((p) => `127.0.0.1:${p}`), slots, servers, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
