import { Redis } from 'ioredis';
import { NatsTransport } from '@sluice/stream/nats';
import { natsUrl, randomPrefix, redisUrl } from './env.js';
import { layoutMismatchSuite } from './layout-mismatch.js';

layoutMismatchSuite('NATS JetStream', async () => {
  const servers = natsUrl();
  const url = redisUrl();
  const prefix = randomPrefix();
  return {
    transport: (partitions) => new NatsTransport({ partitions, servers, prefix, storage: 'memory' }),
    redisUrl: url,
    prefix,
    cleanup: async () => {
      // The ownership store's keys; the memory streams go with the server.
      const admin = new Redis(url);
      const keys = await admin.keys(`${prefix}*`);
      if (keys.length > 0) await admin.del(...keys);
      admin.disconnect();
    },
  };
});
