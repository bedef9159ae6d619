import { fileURLToPath } from 'node:url';

/**
 * The `.proto` files of the gRPC API, shipped in the package for clients of their own (load them
 * with `@grpc/proto-loader` or `protoc -I PROTO_DIR`): `envoy/service/ratelimit/v3/rls.proto`
 * (Envoy's RateLimitService, with its imports), `envoy/service/rate_limit_quota/v3/rlqs.proto`
 * (Envoy's rate limit quota service) and `sluice/v1/outcomes.proto` (Sluice's Outcomes). The server itself reads and writes its messages by hand (./wire.ts, ./outcomes.ts).
 * proto/ is a sibling of both src/ and dist/.
 */
export const PROTO_DIR = fileURLToPath(new URL('../../proto', import.meta.url));

/** The path of Envoy's `RateLimitService/ShouldRateLimit` method. */
export const RLS_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

/** The path of Envoy's `RateLimitQuotaService/StreamRateLimitQuotas` method (a bidirectional stream). */
export const RLQS_PATH = '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas';

/** The path of Sluice's `Outcomes/Report` method. */
export const OUTCOMES_PATH = '/sluice.v1.Outcomes/Report';
