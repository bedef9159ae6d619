import { Redis } from 'ioredis';
import type { EventTransport } from '@sluice/stream';
import { RedisStreamsTransport } from '@sluice/stream/redis';
import { randomPrefix, redisUrl } from './env.js';
import { sustainedBurstSuite } from './sustained-burst.js';

sustainedBurstSuite('Redis Streams', async () => {
  const url = redisUrl();
  const prefix = randomPrefix();
  const made: EventTransport[] = [];
  return {
    transport: () => {
      const t = new RedisStreamsTransport({ partitions: 4, url, prefix, blockMs: 200 });
      made.push(t);
      return t;
    },
    close: async () => {
      for (const t of made) await t.close();
      const admin = new Redis(url);
      const keys = await admin.keys(`${prefix}*`);
      if (keys.length > 0) await admin.del(...keys);
      admin.disconnect();
    },
  };
});
