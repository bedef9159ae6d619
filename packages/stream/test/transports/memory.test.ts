import { MemoryTransport } from '@sluice/stream';
import { runTransportConformance } from './conformance.js';

runTransportConformance({
  name: 'memory',
  partitions: 4,
  shared: false,
  make: async () => new MemoryTransport({ partitions: 4 }),
});
