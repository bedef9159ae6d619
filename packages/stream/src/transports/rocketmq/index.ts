/**
 * `@sluice/stream/rocketmq`: the event stream on Apache RocketMQ 5 (through its gRPC proxy).
 * Needs the optional peer dependency `rocketmq-client-nodejs`.
 *
 * @example
 * import { RocketMqTransport } from '@sluice/stream/rocketmq';
 * const transport = new RocketMqTransport({ partitions: 8, endpoints: '127.0.0.1:8081' });
 */
export { RocketMqTransport, type RocketMqTransportOptions } from './transport.js';
