import * as protoLoader from '@grpc/proto-loader';
import { PROTO_DIR } from '../src/grpc/proto.js';

/**
 * The gRPC API loaded with @grpc/proto-loader from the package's `.proto` files (`PROTO_DIR`), as
 * a client of its own would load it: the tests' independent encoder and decoder of its messages
 * (the server reads and writes them by hand).
 */

/** How proto-loader presents messages to the tests: field names as in the .proto, enums and 64-bit integers as strings, defaults filled. */
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

/** The loaded `sluice.v1.Outcomes` definition. */
export function loadOutcomesDefinition(): protoLoader.ServiceDefinition {
  const pkg = protoLoader.loadSync('sluice/v1/outcomes.proto', PROTO_LOADER_OPTIONS);
  return pkg['sluice.v1.Outcomes'] as protoLoader.ServiceDefinition;
}

/** The loaded `envoy.service.rate_limit_quota.v3.RateLimitQuotaService` definition. */
export function loadRlqsDefinition(): protoLoader.ServiceDefinition {
  const pkg = protoLoader.loadSync('envoy/service/rate_limit_quota/v3/rlqs.proto', PROTO_LOADER_OPTIONS);
  return pkg['envoy.service.rate_limit_quota.v3.RateLimitQuotaService'] as protoLoader.ServiceDefinition;
}
