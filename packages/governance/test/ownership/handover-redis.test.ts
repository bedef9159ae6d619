import { RedisStreamsTransport } from '@sluice/stream/redis';
import { redisClusterNodes, redisUrl } from '../env.js';
import { runHandoverSuite } from './handover.js';

const url = redisUrl();
const clusterNodes = redisClusterNodes();

runHandoverSuite({
  name: 'redis',
  partitions: 4,
  shared: true,
  make: async (prefix) => new RedisStreamsTransport({ partitions: 4, url, prefix, blockMs: 200 }),
});

runHandoverSuite({
  name: 'redis cluster',
  partitions: 4,
  shared: true,
  make: async (prefix) => new RedisStreamsTransport({ partitions: 4, clusterNodes, prefix, blockMs: 200 }),
});
