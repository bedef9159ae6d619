/**
 * The bench's throwaway Redis servers: those of `@sluice/redis/testing`, with `redis-server`
 * installed first (`scripts/redis-servers.sh install`) when it is not on PATH.
 */
import { spawnSync } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  RedisServer,
  hasRedisServer,
  startRedisCluster,
  type RedisCluster,
  type RedisServerOptions,
} from '@sluice/redis/testing';

export { freePort, stopAllRedisServers as stopAllServers, type RedisCluster, RedisServer } from '@sluice/redis/testing';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

function ensureRedisServer(): void {
  if (hasRedisServer()) return;
  console.error('redis-server not found on PATH; installing it with scripts/redis-servers.sh install');
  const install = spawnSync('bash', [resolve(REPO_ROOT, 'scripts/redis-servers.sh'), 'install'], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  if (install.status !== 0 || !hasRedisServer()) throw new Error('could not install redis-server');
}

/** A redis-server on a free loopback port (or the one given), no persistence; see {@link RedisServer}. */
export async function startThrowawayRedis(options: RedisServerOptions = {}): Promise<RedisServer> {
  ensureRedisServer();
  return RedisServer.start(options);
}

/** A Redis Cluster of `masters` masters without replicas; see `startRedisCluster`. */
export async function startThrowawayCluster(masters: number): Promise<RedisCluster> {
  ensureRedisServer();
  return startRedisCluster(masters);
}
