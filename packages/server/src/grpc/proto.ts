import { fileURLToPath } from 'node:url';
import * as protoLoader from '@grpc/proto-loader';

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

/** The path of Envoy's `RateLimitService/ShouldRateLimit` method. */
export const RLS_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

/** The path of Sluice's `Outcomes/Report` method. */
export const OUTCOMES_PATH = '/sluice.v1.Outcomes/Report';

/** The loaded `sluice.v1.Outcomes` definition. */
export function loadOutcomesDefinition(): protoLoader.ServiceDefinition {
  const pkg = protoLoader.loadSync('sluice/v1/outcomes.proto', PROTO_LOADER_OPTIONS);
  return pkg['sluice.v1.Outcomes'] as protoLoader.ServiceDefinition;
}
