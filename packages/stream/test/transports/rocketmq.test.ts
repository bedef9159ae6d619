import { RocketMqTransport } from '@sluice/stream/rocketmq';
import { createRocketMqGroups } from '../../../../test/env.js';
import { runTransportConformance } from './conformance.js';
import { rocketMqEndpoints, rocketMqProxyPid } from './env.js';

const endpoints = rocketMqEndpoints();
// The groups the suite consumes with, bound to the LITE parent topic.
createRocketMqGroups(['order', 'lag', 'keep', 'other', 'poison', 'outage', 'closing']);

for (const mode of ['lite', 'topics'] as const) {
  runTransportConformance({
    name: `rocketmq (${mode})`,
    partitions: 4,
    shared: true,
    make: async (prefix) => new RocketMqTransport({ mode, partitions: 4, endpoints, prefix, awaitMs: 1_000 }),
    // The proxy hands clients its own address in topic routes, so a forwarder in between cannot
    // cut the connection: the drill freezes the proxy process instead (SIGSTOP, then SIGCONT).
    makeCuttable: async (prefix) => {
      const pid = rocketMqProxyPid();
      const signal = (s: NodeJS.Signals) => Promise.resolve(void process.kill(pid, s));
      const transport = new RocketMqTransport({
        mode,
        partitions: 4,
        endpoints,
        prefix,
        awaitMs: 1_000,
        commandTimeoutMs: 1_000,
      });
      return { transport, down: () => signal('SIGSTOP'), up: () => signal('SIGCONT'), dispose: () => signal('SIGCONT') };
    },
  });
}
