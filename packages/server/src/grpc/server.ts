import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { Limiter } from '@sluice/core';
import type { Logger } from 'pino';
import { ServerError, ServerErrorCodes, describeError, grpcStatusOf } from '../errors.js';
import type { OverrideTable } from '../envoy/overrides.js';
import { shouldRateLimit } from '../envoy/rls.js';
import { authorized } from '../http/auth.js';
import type { LiveRules } from '../live-rules.js';
import type { ServerMetrics } from '../metrics.js';
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
  readonly logger: Logger;
  readonly bounds: RlsBounds;
  readonly maxMessageBytes: number;
  /** True once the server is shutting down: new calls are refused. */
  readonly closing: () => boolean;
  /** The bearer token every call must carry in its `authorization` metadata; none: calls are open. */
  readonly token?: string | undefined;
}

const METHOD = 'ShouldRateLimit';

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
  });
  const fail = (callback: grpc.sendUnaryData<unknown>, err: unknown) => {
    const { body, internal } = describeError(err);
    if (internal) deps.logger.error({ err }, 'ShouldRateLimit failed');
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

/** Binds `server` to host:port; resolves the port bound (useful with 0). */
export function bindGrpc(server: grpc.Server, host: string, port: number): Promise<number> {
  const address = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
  return new Promise((resolve, reject) => {
    server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound)));
  });
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
