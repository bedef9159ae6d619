/**
 * OpenTelemetry for Sluice: the limiter's metrics exported over OTLP from the same Prometheus
 * registry `/metrics` is read from, and spans of decision batches and store calls. Reached
 * through `@sluice/core/otel`; the OpenTelemetry packages are optional peers, loaded only by
 * this entry (`@sluice/core/otel/env` reads the variables without them).
 *
 * @example
 * import { Registry } from 'prom-client';
 * import { Limiter } from '@sluice/core';
 * import { createPrometheusObserver } from '@sluice/core/metrics';
 * import { joinObservers, readOtelEnv, startOtel } from '@sluice/core/otel';
 * const registry = new Registry();
 * const otelEnv = readOtelEnv(process.env, { serviceName: 'checkout' });
 * const otel = otelEnv === undefined ? undefined : startOtel(otelEnv, { registry });
 * const limiter = new Limiter({
 *   resources,
 *   observer: joinObservers(createPrometheusObserver({ registry }), otel?.observer),
 * });
 * // Each request's decisions in one span, its store calls as children:
 * const d = await (otel?.tracing?.batch({ operation: 'check', items: 1 }, () => limiter.try('api', { key })) ??
 *   limiter.try('api', { key }));
 * // At exit: await otel?.close();
 */
export {
  OtelEnvError,
  describeOtelEnv,
  readOtelEnv,
  type OtelEnv,
  type OtlpProtocol,
  type OtlpTarget,
  type ReadOtelEnvOptions,
  type SamplerSetting,
} from './env.js';
export { PROMETHEUS_SCOPE, prometheusProducer, type PrometheusProducerOptions } from './producer.js';
export { MAX_ATTRIBUTE_VALUE_LENGTH, startOtel, type OtelSignal, type RunningOtel, type StartOtelOptions } from './sdk.js';
export {
  MAX_NAMED_PER_BATCH,
  createTracing,
  errorType,
  joinObservers,
  type DecisionBatch,
  type DecisionTracing,
  type TracedStore,
  type TracingOptions,
} from './tracing.js';
