import { RocketMqTransport } from '@sluice/stream';
import { runTransportConformance } from './conformance.js';
import { rocketMqEndpoints } from './env.js';

const endpoints = rocketMqEndpoints();

// No outage drill here: the proxy hands clients its own address in topic routes, so a
// forwarder in between cannot cut the connection (see docs/transports.md).
runTransportConformance({
  name: 'rocketmq',
  partitions: 4,
  shared: true,
  make: async (prefix) => new RocketMqTransport({ partitions: 4, endpoints, prefix, awaitMs: 1_000 }),
});
