/**
 * `@sluice/stream`: the wire contract between gateways and aggregators. The event and decision
 * codecs, partitioning, rejection tallies, the `EventTransport` interface, the stream's errors
 * and the in-process `MemoryTransport`. It loads no broker client: the broker transports are the
 * subpaths `@sluice/stream/redis`, `@sluice/stream/nats` and `@sluice/stream/rocketmq`, and the
 * aggregators are `@sluice/governance`.
 *
 * @example
 * import { MemoryTransport, decodeEvents } from '@sluice/stream';
 * const transport = new MemoryTransport({ partitions: 4 });
 * const sub = await transport.consume(0, 'readers', async (batch) => console.log(decodeEvents(batch)));
 */
export * from './transport.js';
export { MemoryTransport, type MemoryTransportOptions } from './transports/memory.js';
export { STREAM_NAME_RULE, isStreamName, type TransportHooks } from './transports/common.js';
export * from './errors.js';
export * from './events/codec.js';
export * from './events/partition.js';
export * from './events/tallies.js';
export * from './decisions/codec.js';
export * from './decisions/announcement.js';
