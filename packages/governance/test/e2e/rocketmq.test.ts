import { randomPrefix, redisUrl, rocketMqEndpoints, rocketMqProxyPid } from '../env.js';
import { PARTITIONS, governanceScenario } from './scenario.js';

const prefix = randomPrefix('e2e').replace('-', '_');

governanceScenario(
  'Apache RocketMQ',
  async () => {
    const spec = { kind: 'rocketmq' as const, partitions: PARTITIONS, prefix, endpoints: rocketMqEndpoints() };
    // The proxy hands clients its own address in topic routes, so a forwarder in between cannot
    // cut the gateways off: the drill freezes the proxy itself (for gateways and aggregators).
    const pid = rocketMqProxyPid();
    const signal = (s: NodeJS.Signals) => Promise.resolve(void process.kill(pid, s));
    return {
      aggregator: spec,
      gateway: spec,
      streamDown: () => signal('SIGSTOP'),
      streamUp: () => signal('SIGCONT'),
      dispose: () => signal('SIGCONT'),
    };
  },
  () => ({ redisUrl: redisUrl(), ownershipPrefix: `${prefix}:agg:` }),
  // A receive that outlives its deadline on a loaded machine leaves its messages invisible
  // until their invisibility period (15 s) ends: a decision may arrive that late.
  { deliveryWaitMs: 45_000 },
);
