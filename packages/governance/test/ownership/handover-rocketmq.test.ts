import { RocketMqTransport } from '@sluice/stream/rocketmq';
import { rocketMqEndpoints } from '../env.js';
import { runHandoverSuite } from './handover.js';

const endpoints = rocketMqEndpoints();

runHandoverSuite({
  name: 'rocketmq',
  partitions: 4,
  shared: true,
  make: async (prefix) => new RocketMqTransport({ partitions: 4, endpoints, prefix, awaitMs: 1_000 }),
  // A receive that outlives its deadline leaves its messages invisible for their invisibility period.
  drainMs: 90_000,
});
