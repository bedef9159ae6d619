/**
 * The OpenTelemetry SDK as the standard variables ask for it ({@link readOtelEnv}): metrics read
 * from a Prometheus registry and pushed over OTLP on an interval, decision and store-call spans
 * pushed in batches. Owned by its caller: {@link RunningOtel.close} flushes and stops it.
 */
import { context, type Tracer } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { OTLPMetricExporter as JsonMetricExporter } from '@opentelemetry/exporter-metrics-otlp-http';
import { OTLPMetricExporter as ProtoMetricExporter } from '@opentelemetry/exporter-metrics-otlp-proto';
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import {
  MeterProvider,
  PeriodicExportingMetricReader,
  type PushMetricExporter,
  type ResourceMetrics,
} from '@opentelemetry/sdk-metrics';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type ReadableSpan,
  type Sampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';
import type { Registry } from 'prom-client';
import type { LimiterObserver } from '../shared/observer.js';
import type { OtelEnv, SamplerSetting } from './env.js';
import { prometheusProducer } from './producer.js';
import { createTracing, type DecisionTracing, type TracedStore } from './tracing.js';

/** Longest span attribute value (characters); longer ones are cut. */
export const MAX_ATTRIBUTE_VALUE_LENGTH = 1024;

/** The signals an export failure can be of. */
export type OtelSignal = 'metrics' | 'traces';

/** Options of {@link startOtel}. */
export interface StartOtelOptions {
  /** The registry whose metrics are exported; without it no metrics are, whatever the variables say. */
  readonly registry?: Registry;
  /** The store named in store-call spans. */
  readonly store?: TracedStore;
  /** The instrumentation scope's version (the package's). */
  readonly version?: string;
  /**
   * Every export that failed (the collector away, a refusal): for a log line (throttled, it
   * comes once per interval at most while the collector is away) and a count. Decisions are
   * never held up by exports. @default nothing
   */
  readonly onExportFailed?: (signal: OtelSignal, error: Error | undefined) => void;
  /** Longest `close()` waits for the last export. @default 5000 */
  readonly shutdownTimeoutMs?: number;
}

/** A running SDK (see {@link startOtel}). */
export interface RunningOtel {
  /** The limiter's hooks for spans (absent when traces are off). */
  readonly observer: LimiterObserver | undefined;
  /** Decision-batch spans (absent when traces are off). */
  readonly tracing: DecisionTracing | undefined;
  /** The tracer spans are made with (absent when traces are off). */
  readonly tracer: Tracer | undefined;
  /** Exports what is pending (the last metrics, spans not sent yet) and stops, within `shutdownTimeoutMs`. */
  close(): Promise<void>;
}

function samplerOf(s: SamplerSetting): Sampler {
  switch (s.name) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return new TraceIdRatioBasedSampler(s.ratio);
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(s.ratio) });
  }
}

/** `exporter`, telling `failed` of each export that did not succeed. */
function watchedMetrics(exporter: PushMetricExporter, failed: (error: Error | undefined) => void): PushMetricExporter {
  return {
    export(metrics: ResourceMetrics, done: (result: ExportResult) => void) {
      exporter.export(metrics, (result) => {
        if (result.code !== ExportResultCode.SUCCESS) failed(result.error);
        done(result);
      });
    },
    forceFlush: () => exporter.forceFlush(),
    shutdown: () => exporter.shutdown(),
    ...(exporter.selectAggregationTemporality === undefined
      ? {}
      : { selectAggregationTemporality: exporter.selectAggregationTemporality.bind(exporter) }),
    ...(exporter.selectAggregation === undefined ? {} : { selectAggregation: exporter.selectAggregation.bind(exporter) }),
  };
}

function watchedSpans(exporter: SpanExporter, failed: (error: Error | undefined) => void): SpanExporter {
  return {
    export(spans: ReadableSpan[], done: (result: ExportResult) => void) {
      exporter.export(spans, (result) => {
        if (result.code !== ExportResultCode.SUCCESS) failed(result.error);
        done(result);
      });
    },
    shutdown: () => exporter.shutdown(),
    ...(exporter.forceFlush === undefined ? {} : { forceFlush: () => exporter.forceFlush!() }),
  };
}

/**
 * Starts what `otel` asks for. Metrics: a `PeriodicExportingMetricReader` whose producer reads
 * `options.registry` (the families of `/metrics`, see {@link prometheusProducer}). Traces: a
 * tracer provider with the sampler of `OTEL_TRACES_SAMPLER`, a batch span processor (its queue
 * bounded: spans beyond it are dropped, never waited for) and Node's `AsyncLocalStorage` context
 * manager, registered globally unless one already is. Nothing is registered as the global
 * meter or tracer provider: an application's own SDK stays its own. The OTLP exporters also
 * read their standard variables for what is not set here (`OTEL_EXPORTER_OTLP_HEADERS`,
 * `_TIMEOUT`, `_COMPRESSION`, certificates).
 */
export function startOtel(otel: OtelEnv, options: StartOtelOptions = {}): RunningOtel {
  const resource = defaultResource().merge(resourceFromAttributes(otel.resource));
  const failed = (signal: OtelSignal) => (error: Error | undefined) => options.onExportFailed?.(signal, error);
  let meters: MeterProvider | undefined;
  if (otel.metrics !== undefined && options.registry !== undefined) {
    const config = { url: otel.metrics.url, timeoutMillis: otel.metrics.timeoutMs };
    const exporter = otel.metrics.protocol === 'http/json' ? new JsonMetricExporter(config) : new ProtoMetricExporter(config);
    const reader = new PeriodicExportingMetricReader({
      exporter: watchedMetrics(exporter, failed('metrics')),
      exportIntervalMillis: otel.metrics.intervalMs,
      exportTimeoutMillis: otel.metrics.timeoutMs,
      metricProducers: [prometheusProducer(options.registry)],
    });
    meters = new MeterProvider({ resource, readers: [reader] });
  }
  let spans: BasicTracerProvider | undefined;
  let tracer: Tracer | undefined;
  let traced: ReturnType<typeof createTracing> | undefined;
  let contextManager: AsyncLocalStorageContextManager | undefined;
  if (otel.traces !== undefined) {
    const config = { url: otel.traces.url };
    const exporter = otel.traces.protocol === 'http/json' ? new JsonTraceExporter(config) : new ProtoTraceExporter(config);
    spans = new BasicTracerProvider({
      resource,
      sampler: samplerOf(otel.traces.sampler),
      // Attribute values can hold what callers sent (an Envoy domain): each is cut to a bound.
      spanLimits: { attributeValueLengthLimit: MAX_ATTRIBUTE_VALUE_LENGTH },
      spanProcessors: [new BatchSpanProcessor(watchedSpans(exporter, failed('traces')))],
    });
    tracer = spans.getTracer('@sluice/core/otel', options.version);
    traced = createTracing({ tracer, ...(options.store === undefined ? {} : { store: options.store }) });
    const manager = new AsyncLocalStorageContextManager().enable();
    if (context.setGlobalContextManager(manager)) contextManager = manager;
    else manager.disable();
  }
  const timeoutMs = options.shutdownTimeoutMs ?? 5000;
  let closed: Promise<void> | undefined;
  return {
    observer: traced?.observer,
    tracing: traced?.tracing,
    tracer,
    close() {
      closed ??= (async () => {
        let timer: NodeJS.Timeout | undefined;
        const bound = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
        });
        await Promise.race([Promise.allSettled([meters?.shutdown(), spans?.shutdown()]), bound]);
        clearTimeout(timer);
        if (contextManager !== undefined) context.disable();
      })();
      return closed;
    },
  };
}
