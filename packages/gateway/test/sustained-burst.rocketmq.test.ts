import type { EventTransport } from '@sluice/stream';
import { RocketMqTransport } from '@sluice/stream/rocketmq';
import { randomPrefix, rocketMqEndpoints } from './env.js';
import { sustainedBurstSuite } from './sustained-burst.js';

sustainedBurstSuite(
  'Apache RocketMQ',
  async () => {
    const endpoints = rocketMqEndpoints();
    const prefix = randomPrefix().replace('-', '_');
    const made: EventTransport[] = [];
    return {
      transport: () => {
        const t = new RocketMqTransport({ partitions: 4, endpoints, prefix, awaitMs: 1_000 });
        made.push(t);
        return t;
      },
      close: async () => {
        for (const t of made) await t.close();
      },
    };
  },
  // A receive that outlives its deadline on a loaded machine leaves its messages invisible
  // until their invisibility period (15 s) ends: a decision may arrive that late.
  { deliverySlackMs: 45_000 },
);
