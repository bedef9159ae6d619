/**
 * Which values of a request the gateway hashes into an event and checks against the decision
 * cache. Every value is cut to `maxValueLength` characters before hashing, so an outsider
 * sending a megabyte header or path costs the gateway no more than a short one.
 */
import type { IncomingMessage } from 'node:http';
import { ErrorCodes, invalid } from '@sluice/core';
import { hashRange } from '@sluice/stream';

/** Reads one value from a request; `undefined` or `''` means "none". */
export type RequestValue = (req: IncomingMessage) => string | undefined;

/** A value read from a request header (the first one when repeated). */
export interface HeaderSource {
  header: string;
}

/** How the gateway finds each dimension of a request. */
export interface DimensionOptions {
  /**
   * The resource (API / route group) a request counts against: a fixed name, or a function.
   * @default the first segment of the path, e.g. `/orders` for `/orders/42` (`/` for the root)
   */
  resource?: string | RequestValue;
  /**
   * The path dimension: a function, or `false` for none.
   * @default the route template where the framework knows it before routing (fastify), else the
   * URL path without its query string
   */
  path?: false | RequestValue;
  /** The user: a header or a function. @default none */
  user?: ValueSelector;
  /**
   * The client IP: `true` for the socket's peer address, a function (e.g. to read a trusted
   * proxy header), or `false` for none. @default true
   */
  ip?: boolean | RequestValue;
  /** The tenant: a header or a function. @default none */
  tenant?: ValueSelector;
}

/** Hashes the first `max` characters of `value` (without copying them); 0 for none. */
export function hashBounded(value: string | undefined, max: number): number {
  if (typeof value !== 'string') return 0;
  return hashRange(value, 0, max);
}

/** The request URL as received (express: before mounting strips a prefix). */
export function rawUrl(req: IncomingMessage): string {
  return (req as { originalUrl?: string }).originalUrl ?? req.url ?? '/';
}

/** Where the path of a URL ends: at its query string, if any. */
export function pathEnd(url: string): number {
  const q = url.indexOf('?');
  return q < 0 ? url.length : q;
}

/** The URL path of a request without its query string (express: the path before mounting). */
export function urlPath(req: IncomingMessage): string {
  const url = rawUrl(req);
  return url.slice(0, pathEnd(url));
}

/** Where the first segment of a path ending at `end` ends: `/orders/42` -> 7 (`/orders`). */
export function firstSegmentEnd(path: string, end: number): number {
  const slash = path.indexOf('/', 1);
  return slash < 0 || slash > end ? end : slash;
}

/** The first path segment of `path`: `/orders/42` -> `/orders`, `/` -> `/`. */
export function firstSegment(path: string): string {
  return path.slice(0, firstSegmentEnd(path, path.length)) || '/';
}

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Where a value is read from a request: a header (`{ header: 'x-tenant' }`) or a function. The
 * user and tenant dimensions and a route limit's `key` take one.
 */
export type ValueSelector = HeaderSource | RequestValue;

/**
 * Compiles a {@link ValueSelector} into a reader (`undefined` stays `undefined`); throws
 * `SLUICE_ERR_INVALID_OPTIONS` naming `field` for anything else.
 */
export function compileSelector(source: ValueSelector | undefined, field: string): RequestValue | undefined {
  if (source === undefined) return undefined;
  if (typeof source === 'function') return source;
  if (typeof source === 'object' && source !== null && typeof source.header === 'string' && source.header !== '') {
    const name = source.header.toLowerCase();
    return (req) => headerValue(req, name);
  }
  throw invalid(ErrorCodes.INVALID_OPTIONS, field, 'must be { header: string } or a function');
}

/** The dimension readers, validated. */
export interface CompiledDimensions {
  /** Fixed resource name, when not read per request. */
  readonly resourceName: string | undefined;
  readonly resource: RequestValue | undefined;
  /** `false`: no path dimension; `undefined`: the default for the framework. */
  readonly path: false | RequestValue | undefined;
  readonly user: RequestValue | undefined;
  readonly ip: RequestValue | undefined;
  readonly tenant: RequestValue | undefined;
}

const peerAddress: RequestValue = (req) => req.socket?.remoteAddress;

/** Validates {@link DimensionOptions}; throws `SLUICE_ERR_INVALID_OPTIONS`. */
export function compileDimensions(options: DimensionOptions = {}): CompiledDimensions {
  const r = options.resource;
  if (r !== undefined && typeof r !== 'function' && (typeof r !== 'string' || r === '')) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'dimensions.resource', 'must be a non-empty string or a function');
  }
  const p = options.path;
  if (p !== undefined && p !== false && typeof p !== 'function') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'dimensions.path', 'must be false or a function');
  }
  const ip = options.ip ?? true;
  if (typeof ip !== 'boolean' && typeof ip !== 'function') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'dimensions.ip', 'must be a boolean or a function');
  }
  return Object.freeze({
    resourceName: typeof r === 'string' ? r : undefined,
    resource: typeof r === 'function' ? r : undefined,
    path: p,
    user: compileSelector(options.user, 'dimensions.user'),
    ip: ip === true ? peerAddress : ip === false ? undefined : ip,
    tenant: compileSelector(options.tenant, 'dimensions.tenant'),
  });
}
