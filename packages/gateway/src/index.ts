/**
 * Sluice gateway governance: a synchronous local decision cache on the request path, an
 * asynchronous event probe, and middleware for node:http, express and fastify.
 *
 * @example
 * import { Gateway, expressMiddleware } from '@sluice/gateway';
 * import { MemoryTransport } from '@sluice/stream';
 * const transport = new MemoryTransport({ partitions: 8 });
 * const gateway = new Gateway({ transport, dimensions: { user: { header: 'x-user-id' } } });
 * await gateway.start();                  // receive block / lift decisions
 * app.use(expressMiddleware(gateway));    // 429 when blocked, an event per answered request
 * // ...
 * await gateway.close();
 */
export { DecisionCache, type ActiveBlock, type DecisionCacheOptions, type DecisionCacheStats } from './decision-cache.js';
export {
  compileDimensions,
  compileSelector,
  firstSegment,
  hashBounded,
  urlPath,
  type CompiledDimensions,
  type DimensionOptions,
  type HeaderSource,
  type RequestValue,
  type ValueSelector,
} from './dimensions.js';
export { expressMiddleware, type ExpressMiddleware } from './express.js';
export {
  fastifyOnRequest,
  registerFastify,
  type FastifyInstanceLike,
  type FastifyOnRequest,
  type FastifyReplyLike,
  type FastifyRequestLike,
} from './fastify.js';
export {
  Gateway,
  writeRejection,
  type CompiledRouteLimit,
  type GatewayCacheOptions,
  type GatewayOptions,
  type GatewayProbeOptions,
  type LimitOptions,
  type Rejection,
  type Route,
  type RouteOptions,
} from './gateway.js';
export { blockHeaders, limiterHeaders, sfString, toSeconds, type PolicyAdvert } from './headers.js';
export { DROP_REASONS, type BlockSource, type DropReason, type GatewayObserver, type LayoutMismatch } from './observer.js';
export { Probe, type ProbeOptions, type ProbeStats } from './probe.js';
