import { NatsTransport } from '@sluice/stream/nats';
import { CutProxy } from '../../../../test/cut-proxy.js';
import { runTransportConformance } from './conformance.js';
import { hostPort, natsUrl } from './env.js';

const servers = natsUrl();

runTransportConformance({
  name: 'nats',
  partitions: 4,
  shared: true,
  make: async (prefix) => new NatsTransport({ partitions: 4, servers, prefix, storage: 'memory' }),
  makeCuttable: async (prefix) => {
    const { host, port } = hostPort(servers);
    const proxy = await CutProxy.start(host, port);
    const transport = new NatsTransport({
      partitions: 4,
      servers: `nats://127.0.0.1:${proxy.port}`,
      prefix,
      storage: 'memory',
      commandTimeoutMs: 1_000,
      reconnectWaitMs: 100,
      reconnectMaxMs: 500,
    });
    return { transport, down: () => proxy.down(), up: () => proxy.up(), dispose: () => proxy.down() };
  },
});
