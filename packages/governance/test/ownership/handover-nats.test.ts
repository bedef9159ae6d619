import { NatsTransport } from '@sluice/stream/nats';
import { natsUrl } from '../env.js';
import { runHandoverSuite } from './handover.js';

const servers = natsUrl();

runHandoverSuite({
  name: 'nats',
  partitions: 4,
  shared: true,
  make: async (prefix) => new NatsTransport({ partitions: 4, servers, prefix, storage: 'memory' }),
});
