/**
 * `@sluice/stream/nats`: the event stream on NATS JetStream. Needs the optional peer dependency
 * `nats`.
 *
 * @example
 * import { NatsTransport } from '@sluice/stream/nats';
 * const transport = new NatsTransport({ partitions: 16, servers: 'nats://127.0.0.1:4222' });
 */
export { NatsTransport, type NatsTransportOptions } from './transport.js';
