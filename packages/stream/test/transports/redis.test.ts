import { RedisStreamsTransport } from '@sluice/stream/redis';
import { CutProxy } from '../../../../test/cut-proxy.js';
import { runTransportConformance } from './conformance.js';
import { hostPort, redisClusterNodes, redisUrl } from './env.js';

const url = redisUrl();
const clusterNodes = redisClusterNodes();

runTransportConformance({
  name: 'redis',
  partitions: 4,
  shared: true,
  make: async (prefix) => new RedisStreamsTransport({ partitions: 4, url, prefix, blockMs: 200 }),
  makeCuttable: async (prefix) => {
    const { host, port } = hostPort(url);
    const proxy = await CutProxy.start(host, port);
    const transport = new RedisStreamsTransport({
      partitions: 4,
      url: `redis://127.0.0.1:${proxy.port}`,
      prefix,
      blockMs: 200,
      commandTimeoutMs: 1_000,
      reconnectMaxMs: 500,
    });
    return { transport, down: () => proxy.down(), up: () => proxy.up(), dispose: () => proxy.down() };
  },
});

runTransportConformance({
  name: 'redis cluster',
  partitions: 4,
  shared: true,
  make: async (prefix) => new RedisStreamsTransport({ partitions: 4, clusterNodes, prefix, blockMs: 200 }),
});
