import { CutProxy } from '../../../../test/cut-proxy.js';
import { randomPrefix, redisUrl } from '../env.js';
import { PARTITIONS, governanceScenario } from './scenario.js';

const prefix = randomPrefix('e2e');

governanceScenario(
  'Redis Streams',
  async () => {
    const url = new URL(redisUrl());
    // Gateways reach Redis through a proxy the test can cut; aggregators connect directly.
    const proxy = await CutProxy.start(url.hostname, Number(url.port));
    const base = { kind: 'redis' as const, partitions: PARTITIONS, prefix };
    return {
      aggregator: { ...base, url: redisUrl() },
      gateway: { ...base, url: `redis://127.0.0.1:${proxy.port}` },
      streamDown: () => proxy.down(),
      streamUp: () => proxy.up(),
      dispose: () => proxy.down(),
    };
  },
  () => ({ redisUrl: redisUrl(), ownershipPrefix: `${prefix}:agg:` }),
);
