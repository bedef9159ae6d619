/**
 * Express (4 and 5) middleware. Express is not a dependency: the middleware only uses
 * node:http's request and response, which express's extend.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { settle, writeRejection, type Gateway, type RouteOptions } from './gateway.js';

/** An express-compatible middleware. */
export type ExpressMiddleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;

/**
 * A middleware that answers 429 for requests blocked by the decision cache (or by the route's
 * exact limiter) and passes the others on, reporting them when their response ends.
 *
 * @example
 * app.use(expressMiddleware(gateway));                                       // every route
 * app.post('/login', expressMiddleware(gateway, { path: '/login', limit }), handler); // one route
 */
export function expressMiddleware(gateway: Gateway, route?: RouteOptions): ExpressMiddleware {
  const compiled = gateway.route(route);
  return (req, res, next) =>
    settle(
      gateway.evaluate(req, res, compiled),
      () => next(),
      (r) => writeRejection(res, r),
    );
}
