import { MemoryTransport } from '@sluice/stream';
import { runHandoverSuite } from './handover.js';

runHandoverSuite({
  name: 'memory',
  partitions: 4,
  shared: false,
  make: async () => new MemoryTransport({ partitions: 4 }),
});
