import { randomPrefix, redisUrl, rocketMqEndpoints } from './env.js';
import { PARTITIONS, governanceScenario } from './scenario.js';

const prefix = randomPrefix('e2e').replace('-', '_');

governanceScenario(
  'Apache RocketMQ',
  async () => {
    const spec = { kind: 'rocketmq' as const, partitions: PARTITIONS, prefix, endpoints: rocketMqEndpoints() };
    return { aggregator: spec, gateway: spec, dispose: () => Promise.resolve() };
  },
  () => ({ redisUrl: redisUrl(), leasePrefix: `${prefix}:agg:` }),
  // The proxy hands clients its own address in topic routes, so a forwarder in between cannot
  // cut the gateways off (see docs/transports.md): no outage drill on this transport.
  { outage: false },
);
