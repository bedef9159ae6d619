/**
 * `@sluice/stream/redis`: the event stream on Redis Streams (standalone or Cluster). Needs the
 * optional peer dependencies `@sluice/redis` and `ioredis`.
 *
 * @example
 * import { RedisStreamsTransport } from '@sluice/stream/redis';
 * const transport = new RedisStreamsTransport({ partitions: 16, url: 'redis://127.0.0.1:6379' });
 */
export { RedisStreamsTransport, type RedisStreamsTransportOptions } from './transport.js';
export type { RedisEndpoint } from './connect.js';
