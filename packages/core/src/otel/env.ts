/**
 * The standard OpenTelemetry environment variables, read and checked without loading the SDK:
 * what `@sluice/core/otel`'s {@link readOtelEnv} returns decides whether the SDK is loaded at all.
 * A value that is not understood is refused ({@link OtelEnvError}), never ignored.
 *
 * @example
 * import { readOtelEnv } from '@sluice/core/otel/env';
 * const otel = readOtelEnv(process.env, { serviceName: 'checkout' });
 * if (otel !== undefined) {
 *   const { startOtel } = await import('@sluice/core/otel');
 *   const sdk = await startOtel(otel, { registry });
 * }
 */
import { ErrorCodes, SluiceError } from '../shared/errors.js';

/** The OTLP encodings Sluice exports with (`grpc` is not offered: use a collector's OTLP/HTTP port). */
export type OtlpProtocol = 'http/protobuf' | 'http/json';

/** `OTEL_TRACES_SAMPLER` and its argument. */
export interface SamplerSetting {
  readonly name:
    'always_on' | 'always_off' | 'traceidratio' | 'parentbased_always_on' | 'parentbased_always_off' | 'parentbased_traceidratio';
  /** The ratio of the `traceidratio` samplers, 0..1. */
  readonly ratio: number;
}

/** Where one signal is exported. */
export interface OtlpTarget {
  /** The full URL the exporter posts to (e.g. `http://collector:4318/v1/metrics`). */
  readonly url: string;
  readonly protocol: OtlpProtocol;
}

/** What the variables ask for; each signal absent when it is not exported. */
export interface OtelEnv {
  readonly metrics?: OtlpTarget & {
    /** `OTEL_METRIC_EXPORT_INTERVAL` @default 60000 */
    readonly intervalMs: number;
    /** `OTEL_METRIC_EXPORT_TIMEOUT`, at most the interval. @default 30000 */
    readonly timeoutMs: number;
  };
  readonly traces?: OtlpTarget & { readonly sampler: SamplerSetting };
  /** `service.name` and `OTEL_RESOURCE_ATTRIBUTES`, as the resource carries them. */
  readonly resource: Readonly<Record<string, string>>;
}

/** A variable whose value is not understood (`SLUICE_ERR_INVALID_OPTIONS`); `field` names it. */
export class OtelEnvError extends SluiceError {
  constructor(variable: string, message: string) {
    super(ErrorCodes.INVALID_OPTIONS, `${variable}: ${message}`, { field: variable });
    this.name = 'OtelEnvError';
  }
}

/** Options of {@link readOtelEnv}. */
export interface ReadOtelEnvOptions {
  /** `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one. */
  readonly serviceName: string;
}

const DEFAULT_ENDPOINT = 'http://localhost:4318';
const SAMPLERS: readonly SamplerSetting['name'][] = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
];
/** Most entries of `OTEL_RESOURCE_ATTRIBUTES`, and the longest value: an outsider may write them. */
const MAX_RESOURCE_ATTRIBUTES = 64;
const MAX_ATTRIBUTE_LENGTH = 4096;

type Env = Readonly<Record<string, string | undefined>>;

/** A variable's value, trimmed; undefined when unset or empty (the specification's "unset"). */
function value(env: Env, name: string): string | undefined {
  const v = env[name]?.trim();
  return v === undefined || v === '' ? undefined : v;
}

/**
 * Reads the variables. Undefined when nothing is exported: `OTEL_SDK_DISABLED=true`, or no signal
 * asked for. A signal is exported when its `OTEL_{METRICS,TRACES}_EXPORTER` is `otlp`, or when
 * that variable is unset and an OTLP endpoint is (`OTEL_EXPORTER_OTLP_ENDPOINT` or the signal's
 * own); `none` turns it off.
 *
 * @throws OtelEnvError for a value that is not understood (an exporter other than `otlp`/`none`,
 *   protocol `grpc`, a URL that does not parse, a malformed resource attribute, a bad interval
 *   or sampler)
 */
export function readOtelEnv(env: Env, options: ReadOtelEnvOptions): OtelEnv | undefined {
  const disabled = value(env, 'OTEL_SDK_DISABLED')?.toLowerCase();
  if (disabled !== undefined && disabled !== 'true' && disabled !== 'false') {
    throw new OtelEnvError('OTEL_SDK_DISABLED', `must be true or false, got ${JSON.stringify(disabled)}`);
  }
  if (disabled === 'true') return undefined;
  const metricsOn = exporterOn(env, 'METRICS');
  const tracesOn = exporterOn(env, 'TRACES');
  if (!metricsOn && !tracesOn) return undefined;
  const resource = resourceOf(env, options.serviceName);
  return {
    resource,
    ...(metricsOn ? { metrics: { ...target(env, 'METRICS', '/v1/metrics'), ...interval(env) } } : {}),
    ...(tracesOn ? { traces: { ...target(env, 'TRACES', '/v1/traces'), sampler: sampler(env) } } : {}),
  };
}

function exporterOn(env: Env, signal: 'METRICS' | 'TRACES'): boolean {
  const name = `OTEL_${signal}_EXPORTER`;
  const exporter = value(env, name)?.toLowerCase();
  if (exporter === undefined) {
    return (
      value(env, 'OTEL_EXPORTER_OTLP_ENDPOINT') !== undefined || value(env, `OTEL_EXPORTER_OTLP_${signal}_ENDPOINT`) !== undefined
    );
  }
  if (exporter === 'otlp') return true;
  if (exporter === 'none') return false;
  const hint = exporter === 'prometheus' ? ' (Prometheus reads /metrics)' : '';
  throw new OtelEnvError(name, `must be otlp or none, got ${JSON.stringify(exporter)}${hint}`);
}

function target(env: Env, signal: 'METRICS' | 'TRACES', path: string): OtlpTarget {
  const own = `OTEL_EXPORTER_OTLP_${signal}_ENDPOINT`;
  const ownUrl = value(env, own);
  // The signal's own endpoint is the whole URL; the shared one is a base the signal's path joins.
  const [name, url] =
    ownUrl !== undefined
      ? [own, ownUrl]
      : [
          'OTEL_EXPORTER_OTLP_ENDPOINT',
          (value(env, 'OTEL_EXPORTER_OTLP_ENDPOINT') ?? DEFAULT_ENDPOINT).replace(/\/+$/, '') + path,
        ];
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new OtelEnvError(name, `not a URL: ${JSON.stringify(url)}`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new OtelEnvError(name, `must be an http or https URL, got ${JSON.stringify(url)}`);
  }
  return { url: parsed.href, protocol: protocol(env, signal) };
}

function protocol(env: Env, signal: 'METRICS' | 'TRACES'): OtlpProtocol {
  const own = `OTEL_EXPORTER_OTLP_${signal}_PROTOCOL`;
  const name = value(env, own) !== undefined ? own : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const p = value(env, name) ?? 'http/protobuf';
  if (p === 'http/protobuf' || p === 'http/json') return p;
  const hint = p === 'grpc' ? " (OTLP over gRPC is not offered: use the collector's OTLP/HTTP port, 4318)" : '';
  throw new OtelEnvError(name, `must be http/protobuf or http/json, got ${JSON.stringify(p)}${hint}`);
}

function positiveInteger(env: Env, name: string, fallback: number): number {
  const v = value(env, name);
  if (v === undefined) return fallback;
  if (!/^\d+$/.test(v) || Number(v) <= 0 || !Number.isSafeInteger(Number(v))) {
    throw new OtelEnvError(name, `must be a positive whole number of milliseconds, got ${JSON.stringify(v)}`);
  }
  return Number(v);
}

function interval(env: Env): { intervalMs: number; timeoutMs: number } {
  const intervalMs = positiveInteger(env, 'OTEL_METRIC_EXPORT_INTERVAL', 60_000);
  // An export may not outlast the interval (the SDK refuses that): the timeout is capped by it.
  const timeoutMs = Math.min(positiveInteger(env, 'OTEL_METRIC_EXPORT_TIMEOUT', 30_000), intervalMs);
  return { intervalMs, timeoutMs };
}

function sampler(env: Env): SamplerSetting {
  const name = (value(env, 'OTEL_TRACES_SAMPLER') ?? 'parentbased_always_on').toLowerCase();
  if (!(SAMPLERS as readonly string[]).includes(name)) {
    throw new OtelEnvError('OTEL_TRACES_SAMPLER', `must be one of ${SAMPLERS.join(', ')}, got ${JSON.stringify(name)}`);
  }
  const arg = value(env, 'OTEL_TRACES_SAMPLER_ARG');
  if (!name.endsWith('traceidratio')) return { name: name as SamplerSetting['name'], ratio: 1 };
  const ratio = arg === undefined ? 1 : Number(arg);
  if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1 || arg === '') {
    throw new OtelEnvError('OTEL_TRACES_SAMPLER_ARG', `must be a ratio from 0 to 1, got ${JSON.stringify(arg)}`);
  }
  return { name: name as SamplerSetting['name'], ratio };
}

/**
 * `OTEL_RESOURCE_ATTRIBUTES` (`key=value` pairs joined by commas, values percent-encoded) with
 * `service.name` from `OTEL_SERVICE_NAME`, else from the attributes, else the default.
 */
function resourceOf(env: Env, serviceName: string): Record<string, string> {
  const attributes: Record<string, string> = {};
  const raw = value(env, 'OTEL_RESOURCE_ATTRIBUTES');
  if (raw !== undefined) {
    const pairs = raw.split(',');
    if (pairs.length > MAX_RESOURCE_ATTRIBUTES) {
      throw new OtelEnvError('OTEL_RESOURCE_ATTRIBUTES', `at most ${MAX_RESOURCE_ATTRIBUTES} attributes, got ${pairs.length}`);
    }
    for (const pair of pairs) {
      const at = pair.indexOf('=');
      const key = pair.slice(0, Math.max(at, 0)).trim();
      if (at < 0 || key === '') {
        throw new OtelEnvError('OTEL_RESOURCE_ATTRIBUTES', `each entry must be key=value, got ${JSON.stringify(pair.trim())}`);
      }
      let decoded: string;
      try {
        decoded = decodeURIComponent(pair.slice(at + 1).trim());
      } catch {
        throw new OtelEnvError('OTEL_RESOURCE_ATTRIBUTES', `the value of ${key} is not percent-encoded correctly`);
      }
      if (decoded.length > MAX_ATTRIBUTE_LENGTH) {
        throw new OtelEnvError(
          'OTEL_RESOURCE_ATTRIBUTES',
          `the value of ${key} is longer than ${MAX_ATTRIBUTE_LENGTH} characters`,
        );
      }
      attributes[key] = decoded;
    }
  }
  const named = value(env, 'OTEL_SERVICE_NAME');
  attributes['service.name'] = named ?? attributes['service.name'] ?? serviceName;
  return attributes;
}

/** One line for a start log: what is exported where. */
export function describeOtelEnv(otel: OtelEnv): Record<string, unknown> {
  return {
    service: otel.resource['service.name'],
    metrics:
      otel.metrics === undefined ? 'off' : `${otel.metrics.url} (${otel.metrics.protocol}, every ${otel.metrics.intervalMs} ms)`,
    traces:
      otel.traces === undefined
        ? 'off'
        : `${otel.traces.url} (${otel.traces.protocol}, sampler ${otel.traces.sampler.name}${otel.traces.sampler.name.endsWith('ratio') ? ` ${otel.traces.sampler.ratio}` : ''})`,
  };
}
