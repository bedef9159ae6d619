/**
 * For testing code that uses a {@link RemoteLimiter} without running `sluice serve`: a fake
 * service in the same process, behind the client's `transport` option, deciding with a core
 * limiter on the clock you give it.
 *
 * @example
 * import { ManualClock } from '@sluice/core';
 * import { RemoteLimiter } from '@sluice/client';
 * import { FakeService } from '@sluice/client/testing';
 * const clock = new ManualClock();
 * const service = new FakeService({ 'api:a': { limits: { algorithm: 'fixed-window', limit: 1, windowMs: 1000 } } }, clock);
 * const limiter = new RemoteLimiter({ url: 'http://fake', transport: service, clock });
 * await limiter.try('api:a'); // allowed
 * await limiter.try('api:a'); // denied until clock.advance(1000)
 * service.down = true; // now the service is unreachable: the store-failure policy decides
 */
export { FakeService, type Seen } from './fake-service.js';
