/**
 * Fastify (4 and 5) integration as an `onRequest` hook. Fastify is not a dependency: the hook
 * is typed by the few members it uses. In `onRequest` fastify already knows the route, so the
 * path dimension defaults to the route template (`/orders/:id`), not the raw URL.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { settle, type Gateway, type Rejection, type RouteOptions } from './gateway.js';

/** The members of a fastify request the hook reads. */
export interface FastifyRequestLike {
  readonly raw: IncomingMessage;
  readonly routeOptions?: { readonly url?: string };
}

/** The members of a fastify reply the hook uses. */
export interface FastifyReplyLike {
  readonly raw: ServerResponse;
  code(statusCode: number): FastifyReplyLike;
  headers(values: Record<string, string>): FastifyReplyLike;
  send(payload?: unknown): FastifyReplyLike;
}

/** A callback-style fastify `onRequest` hook. */
export type FastifyOnRequest = (request: FastifyRequestLike, reply: FastifyReplyLike, done: (err?: Error) => void) => void;

/** The member of a fastify instance {@link registerFastify} uses. */
export interface FastifyInstanceLike {
  addHook(name: 'onRequest', hook: FastifyOnRequest): unknown;
}

function reject(reply: FastifyReplyLike, r: Rejection): void {
  reply.code(r.status).headers(r.headers).send(r.body);
}

/**
 * An `onRequest` hook for one route (`{ onRequest: fastifyOnRequest(gateway, { limit }) }`)
 * or, through {@link registerFastify}, for every route of an instance.
 */
export function fastifyOnRequest(gateway: Gateway, route?: RouteOptions): FastifyOnRequest {
  const compiled = gateway.route(route);
  return (request, reply, done) =>
    settle(
      gateway.evaluate(request.raw, reply.raw, compiled, request.routeOptions?.url),
      () => done(),
      (r) => reject(reply, r),
    );
}

/**
 * Adds the gateway's `onRequest` hook to a fastify instance (and so to every route registered
 * in its context).
 *
 * @example
 * const app = Fastify();
 * registerFastify(app, gateway);
 * app.get('/orders/:id', handler);
 */
export function registerFastify(app: FastifyInstanceLike, gateway: Gateway, route?: RouteOptions): void {
  app.addHook('onRequest', fastifyOnRequest(gateway, route));
}
