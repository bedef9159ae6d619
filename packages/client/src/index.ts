/**
 * Sluice's remote client: the limiter interface over a running `sluice serve`, with batched
 * checks, client-side leases and the store-failure policies while the service is away.
 *
 * @example
 * import { RemoteLimiter } from '@sluice/client';
 * const limiter = new RemoteLimiter({ url: 'http://127.0.0.1:8080' });
 * const d = await limiter.try('api:payments', { key: 'tenant-a' });
 * if (!d.allowed) console.log(`retry in ${d.retryAfterMs} ms`);
 * await limiter.close();
 */
export { RemoteLimiter } from './remote-limiter.js';
export type { ClientLeaseSettings, ClientTlsOptions, RemoteLimiterOptions } from './options.js';
export { serviceTimeSource, type ClientClockSkewOptions } from './clock-skew.js';
export type { RolloutView, RulesView } from './wire.js';
export {
  CLIENT_HEARTBEAT_HEADER,
  CLIENT_ID_HEADER,
  HttpTransport,
  RULES_VERSION_HEADER,
  isUnavailable,
  type Answer,
  type CallOptions,
  type HttpTransportOptions,
  type Transport,
} from './transport.js';
export type { OutcomeReporterStats } from './outcome-reporter.js';
