import type { EventTransport } from '@sluice/stream';
import { NatsTransport } from '@sluice/stream/nats';
import { natsUrl, randomPrefix } from './env.js';
import { sustainedBurstSuite } from './sustained-burst.js';

sustainedBurstSuite('NATS JetStream', async () => {
  const servers = natsUrl();
  const prefix = randomPrefix();
  const made: EventTransport[] = [];
  return {
    transport: () => {
      const t = new NatsTransport({ partitions: 4, servers, prefix, storage: 'memory' });
      made.push(t);
      return t;
    },
    close: async () => {
      for (const t of made) await t.close();
    },
  };
});
