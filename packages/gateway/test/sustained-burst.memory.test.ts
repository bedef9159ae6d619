import { MemoryTransport } from '@sluice/stream';
import { sustainedBurstSuite } from './sustained-burst.js';

sustainedBurstSuite('the in-process stream', async () => {
  const transport = new MemoryTransport({ partitions: 4 });
  return { transport: () => transport, close: () => transport.close() };
});
