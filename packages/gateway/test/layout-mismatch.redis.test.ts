import { Redis } from 'ioredis';
import { RedisStreamsTransport } from '@sluice/stream/redis';
import { randomPrefix, redisUrl } from './env.js';
import { layoutMismatchSuite } from './layout-mismatch.js';

layoutMismatchSuite('Redis Streams', async () => {
  const url = redisUrl();
  const prefix = randomPrefix();
  return {
    transport: (partitions) => new RedisStreamsTransport({ partitions, url, prefix, blockMs: 200 }),
    redisUrl: url,
    prefix,
    cleanup: async () => {
      const admin = new Redis(url);
      const keys = await admin.keys(`${prefix}*`);
      if (keys.length > 0) await admin.del(...keys);
      admin.disconnect();
    },
  };
});
