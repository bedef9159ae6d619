import { createServer, type Server as NetServer } from 'node:net';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { Limiter } from '@sluice/core';
import { limitConnections, type ConnectionCut, type ConnectionLimits } from '../connections.js';
import { ServerError, ServerErrorCodes, describeError, grpcStatusOf } from '../errors.js';
import type { OverrideTable } from '../envoy/overrides.js';
import { shouldRateLimit } from '../envoy/rls.js';
import { authorized } from '../http/auth.js';
import type { LiveRules } from '../live-rules.js';
import type { ServerMetrics } from '../metrics.js';
import type { WarningThrottle } from '../logging.js';
import { decodeRlsRequest, encodeRlsResponse, type RlsBounds } from './codec.js';
import { invalidUtf8Field } from './utf8.js';

/** proto/ is a sibling of both src/ and dist/. */
export const PROTO_DIR = fileURLToPath(new URL('../../proto', import.meta.url));

/** How proto-loader presents messages to the server and to clients of the tests and the CLI. */
export const PROTO_LOADER_OPTIONS: protoLoader.Options = Object.freeze({
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
});

/** The loaded `envoy.service.ratelimit.v3.RateLimitService` definition. */
export function loadRlsDefinition(): protoLoader.ServiceDefinition {
  const pkg = protoLoader.loadSync('envoy/service/ratelimit/v3/rls.proto', PROTO_LOADER_OPTIONS);
  return pkg['envoy.service.ratelimit.v3.RateLimitService'] as protoLoader.ServiceDefinition;
}

/** Marks a request that could not be decoded, so the handler answers INVALID_ARGUMENT. */
const MALFORMED = Symbol('malformed');
interface Malformed {
  readonly [MALFORMED]: ServerError;
}

/** What the gRPC server is built from. */
export interface GrpcDeps {
  readonly limiter: Limiter;
  readonly rules: LiveRules;
  /** The limits of the overrides requests carry. */
  readonly overrides: OverrideTable;
  readonly metrics: ServerMetrics;
  /** Internal faults are logged through it (a client can repeat the calls causing them). */
  readonly warnings: WarningThrottle;
  readonly bounds: RlsBounds;
  readonly maxMessageBytes: number;
  /** How long a connection may stay open with no call in progress. */
  readonly idleTimeoutMs: number;
  /** How long calls in progress may finish once a connection reached its age (see {@link MAX_CONNECTION_AGE_MS}). */
  readonly bodyTimeoutMs: number;
  /** True once the server is shutting down: new calls are refused. */
  readonly closing: () => boolean;
  /** The bearer token every call must carry in its `authorization` metadata; none: calls are open. */
  readonly token?: string | undefined;
}

const METHOD = 'ShouldRateLimit';

/**
 * Most concurrent calls on one connection: each may buffer up to `maxMessageBytes`, so this
 * bounds a connection's memory. Envoy keeps far fewer calls in flight per connection.
 */
export const MAX_CONCURRENT_STREAMS = 100;
/**
 * Every connection is asked to go away (GOAWAY) at this age; calls in progress then have the
 * request timeout to finish. grpc-js has no timeout on receiving a call, so this bounds how long
 * a call whose message never completes holds its connection. Clients reconnect at once.
 */
export const MAX_CONNECTION_AGE_MS = 120_000;

/**
 * A gRPC server offering Envoy's `RateLimitService/ShouldRateLimit`. Undecodable messages
 * are answered INVALID_ARGUMENT (grpc-js alone would say INTERNAL); every error carries its
 * stable code in the `sluice-error-code` trailer, its gRPC status derived from it.
 */
export function buildGrpcServer(deps: GrpcDeps): grpc.Server {
  const def = loadRlsDefinition();
  const method = def[METHOD]!;
  const service: grpc.ServiceDefinition = {
    [METHOD]: {
      ...method,
      requestDeserialize: (buf: Buffer): unknown => {
        let request: unknown;
        try {
          request = method.requestDeserialize(buf);
        } catch (err) {
          const why = err instanceof Error ? err.message : String(err);
          return {
            [MALFORMED]: new ServerError(ServerErrorCodes.MALFORMED_BODY, `not a RateLimitRequest: ${why}`),
          } satisfies Malformed;
        }
        // Decoding turned invalid bytes into U+FFFD: refuse them rather than merge distinct strings.
        const field = invalidUtf8Field(buf);
        if (field === undefined) return request;
        return {
          [MALFORMED]: new ServerError(ServerErrorCodes.INVALID_REQUEST, `${field}: must be valid UTF-8`, { field }),
        } satisfies Malformed;
      },
    },
  };
  const server = new grpc.Server({
    'grpc.max_receive_message_length': deps.maxMessageBytes,
    'grpc.max_send_message_length': 4 * 1024 * 1024,
    'grpc.max_concurrent_streams': MAX_CONCURRENT_STREAMS,
    'grpc.max_connection_idle_ms': deps.idleTimeoutMs,
    'grpc.max_connection_age_ms': MAX_CONNECTION_AGE_MS,
    'grpc.max_connection_age_grace_ms': deps.bodyTimeoutMs,
    // Pings find peers that vanished without closing (their connections would count against the caps).
    'grpc.keepalive_time_ms': 60_000,
    'grpc.keepalive_timeout_ms': 20_000,
  });
  const fail = (callback: grpc.sendUnaryData<unknown>, err: unknown) => {
    const { body, internal } = describeError(err);
    if (internal) deps.warnings.error('grpc_failed', { err }, 'ShouldRateLimit failed');
    const metadata = new grpc.Metadata();
    metadata.set('sluice-error-code', body.code);
    const code = grpcStatusOf(body.code);
    deps.metrics.grpcRequest(METHOD, code);
    callback({ code, details: `${body.code}: ${body.message}`, metadata }, null);
  };
  server.addService(service, {
    [METHOD]: (call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => {
      if (!authorized(call.metadata.get('authorization')[0], deps.token)) {
        fail(
          callback,
          new ServerError(ServerErrorCodes.UNAUTHORIZED, 'a valid bearer token is required in the authorization metadata'),
        );
        return;
      }
      const raw = call.request;
      if (typeof raw === 'object' && raw !== null && MALFORMED in raw) {
        fail(callback, (raw as Malformed)[MALFORMED]);
        return;
      }
      if (deps.closing()) {
        fail(callback, new ServerError(ServerErrorCodes.SHUTTING_DOWN, 'the server is shutting down'));
        return;
      }
      let request;
      try {
        request = decodeRlsRequest(raw, deps.bounds);
      } catch (err) {
        fail(callback, err);
        return;
      }
      shouldRateLimit(request, deps.limiter, deps.rules, deps.overrides).then(
        (response) => {
          deps.metrics.grpcRequest(METHOD, grpc.status.OK);
          callback(null, encodeRlsResponse(response));
        },
        (err: unknown) => fail(callback, err),
      );
    },
  });
  return server;
}

/** The gRPC listener: its port, and `close()` to stop accepting connections. */
export interface GrpcListener {
  readonly port: number;
  close(): void;
}

/**
 * Listens on host:port (0: any free port) and hands `server` the connections within `limits`
 * (grpc-js has no connection cap of its own); `cut` hears of each connection refused.
 */
export async function bindGrpc(
  server: grpc.Server,
  host: string,
  port: number,
  limits: ConnectionLimits,
  cut: (reason: ConnectionCut) => void,
): Promise<GrpcListener> {
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const listener: NetServer = createServer();
  limitConnections(listener, limits, cut, (socket) => injector.injectConnection(socket));
  try {
    listener.listen(port, host);
    await once(listener, 'listening');
  } catch (err) {
    injector.destroy();
    throw err;
  }
  const address = listener.address();
  return {
    port: typeof address === 'object' && address !== null ? address.port : port,
    close: () => {
      listener.close();
    },
  };
}

/** Stops taking calls, lets in-flight ones finish within `graceMs`, then cuts the rest. */
export function shutdownGrpc(server: grpc.Server, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, graceMs);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
