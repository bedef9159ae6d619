/**
 * Throwaway Redis servers for tests and benchmarks: a single `redis-server` that can be crashed,
 * frozen and restarted on its port, and a Redis Cluster of N masters. They need `redis-server`
 * (>= 7) on PATH, listen on loopback only and keep nothing on disk.
 *
 * @example
 * import { RedisServer, startRedisCluster, stopAllRedisServers } from '@sluice/redis/testing';
 * const redis = await RedisServer.start();
 * redis.signal('SIGSTOP'); // frozen: commands time out
 * redis.signal('SIGCONT');
 * const cluster = await startRedisCluster(3);
 * await cluster.stop();
 * await stopAllRedisServers(); // whatever is still running
 */
export {
  RedisServer,
  freePort,
  hasRedisServer,
  redisServerVersion,
  stopAllRedisServers,
  type RedisServerOptions,
} from './redis-server.js';
export { startRedisCluster, type RedisCluster, type RedisClusterOptions } from './redis-cluster.js';
