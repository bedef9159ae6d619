import { CutProxy } from '../../../../test/cut-proxy.js';
import { natsUrl, randomPrefix, redisUrl } from '../env.js';
import { PARTITIONS, governanceScenario } from './scenario.js';

const prefix = randomPrefix('e2e');

governanceScenario(
  'NATS JetStream',
  async () => {
    const url = new URL(natsUrl());
    // Gateways reach NATS through a proxy the test can cut; aggregators connect directly.
    const proxy = await CutProxy.start(url.hostname, Number(url.port));
    const base = { kind: 'nats' as const, partitions: PARTITIONS, prefix };
    return {
      aggregator: { ...base, servers: natsUrl() },
      gateway: { ...base, servers: `nats://127.0.0.1:${proxy.port}` },
      streamDown: () => proxy.down(),
      streamUp: () => proxy.up(),
      dispose: () => proxy.down(),
    };
  },
  // Ownership and snapshots stay in Redis whatever carries the events.
  () => ({ redisUrl: redisUrl(), ownershipPrefix: `${prefix}:agg:` }),
);
