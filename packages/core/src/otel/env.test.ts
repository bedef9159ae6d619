import { describe, expect, it } from 'vitest';
import { OtelEnvError, describeOtelEnv, readOtelEnv } from './env.js';

const read = (env: Record<string, string>) => readOtelEnv(env, { serviceName: 'sluice' });

/** The message `env` is refused with. */
function refusal(env: Record<string, string>): string {
  try {
    read(env);
  } catch (err) {
    expect(err).toBeInstanceOf(OtelEnvError);
    expect((err as OtelEnvError).code).toBe('SLUICE_ERR_INVALID_OPTIONS');
    return (err as Error).message;
  }
  throw new Error('not refused');
}

describe('readOtelEnv', () => {
  it('is off without an exporter or an endpoint, with OTEL_SDK_DISABLED=true, and with both exporters none', () => {
    expect(read({})).toBeUndefined();
    expect(read({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on' })).toBeUndefined();
    expect(read({ OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toBeUndefined();
    expect(
      read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_METRICS_EXPORTER: 'none', OTEL_TRACES_EXPORTER: 'none' }),
    ).toBeUndefined();
  });

  it('turns both signals on for a shared endpoint, each at its path, with the defaults', () => {
    expect(read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
      resource: { 'service.name': 'sluice' },
      metrics: { url: 'http://collector:4318/v1/metrics', protocol: 'http/protobuf', intervalMs: 60_000, timeoutMs: 30_000 },
      traces: {
        url: 'http://collector:4318/v1/traces',
        protocol: 'http/protobuf',
        sampler: { name: 'parentbased_always_on', ratio: 1 },
      },
    });
  });

  it('takes a signal endpoint as the whole URL and turns on only that signal', () => {
    const otel = read({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example:4318/custom' });
    expect(otel?.metrics).toBeUndefined();
    expect(otel?.traces?.url).toBe('https://traces.example:4318/custom');
  });

  it('an exporter set to otlp exports to the default endpoint; none turns its signal off', () => {
    const otel = read({ OTEL_METRICS_EXPORTER: 'otlp', OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' });
    expect(otel?.metrics?.url).toBe('http://localhost:4318/v1/metrics');
    expect(otel?.metrics?.protocol).toBe('http/json');
    expect(otel?.traces).toBeUndefined();
  });

  it('reads the signal protocol over the shared one, the interval, the timeout capped by it, and the sampler', () => {
    const otel = read({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf',
      OTEL_METRIC_EXPORT_INTERVAL: '1000',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.25',
    });
    expect(otel?.metrics).toMatchObject({ protocol: 'http/json', intervalMs: 1000, timeoutMs: 1000 });
    expect(otel?.traces).toMatchObject({ protocol: 'http/protobuf', sampler: { name: 'parentbased_traceidratio', ratio: 0.25 } });
  });

  it('builds the resource from OTEL_RESOURCE_ATTRIBUTES (percent-decoded) with OTEL_SERVICE_NAME over service.name', () => {
    const env = {
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
      OTEL_RESOURCE_ATTRIBUTES: 'service.name=a, team=rate%20control,k=v=w',
    };
    expect(read(env)?.resource).toEqual({ 'service.name': 'a', team: 'rate control', k: 'v=w' });
    expect(read({ ...env, OTEL_SERVICE_NAME: 'edge' })?.resource['service.name']).toBe('edge');
  });

  it('refuses what it does not understand, naming the variable', () => {
    const on = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' };
    expect(refusal({ OTEL_SDK_DISABLED: 'yes' })).toBe('OTEL_SDK_DISABLED: must be true or false, got "yes"');
    expect(refusal({ OTEL_METRICS_EXPORTER: 'prometheus' })).toBe(
      'OTEL_METRICS_EXPORTER: must be otlp or none, got "prometheus" (Prometheus reads /metrics)',
    );
    expect(refusal({ OTEL_TRACES_EXPORTER: 'zipkin' })).toBe('OTEL_TRACES_EXPORTER: must be otlp or none, got "zipkin"');
    expect(refusal({ ...on, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toMatch(
      /^OTEL_EXPORTER_OTLP_PROTOCOL: must be http\/protobuf or http\/json, got "grpc" \(OTLP over gRPC is not offered/,
    );
    expect(refusal({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toBe(
      'OTEL_EXPORTER_OTLP_ENDPOINT: must be an http or https URL, got "collector:4318/v1/metrics"',
    );
    expect(refusal({ OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: 'not a url' })).toBe(
      'OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: not a URL: "not a url"',
    );
    expect(refusal({ ...on, OTEL_METRIC_EXPORT_INTERVAL: '10s' })).toBe(
      'OTEL_METRIC_EXPORT_INTERVAL: must be a positive whole number of milliseconds, got "10s"',
    );
    expect(refusal({ ...on, OTEL_METRIC_EXPORT_INTERVAL: '0' })).toMatch(/^OTEL_METRIC_EXPORT_INTERVAL: /);
    expect(refusal({ ...on, OTEL_TRACES_SAMPLER: 'sometimes' })).toMatch(/^OTEL_TRACES_SAMPLER: must be one of always_on, /);
    expect(refusal({ ...on, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' })).toBe(
      'OTEL_TRACES_SAMPLER_ARG: must be a ratio from 0 to 1, got "2"',
    );
    expect(refusal({ ...on, OTEL_RESOURCE_ATTRIBUTES: 'team' })).toBe(
      'OTEL_RESOURCE_ATTRIBUTES: each entry must be key=value, got "team"',
    );
    expect(refusal({ ...on, OTEL_RESOURCE_ATTRIBUTES: 'team=%zz' })).toBe(
      'OTEL_RESOURCE_ATTRIBUTES: the value of team is not percent-encoded correctly',
    );
    expect(refusal({ ...on, OTEL_RESOURCE_ATTRIBUTES: Array.from({ length: 65 }, (_, i) => `k${i}=v`).join(',') })).toBe(
      'OTEL_RESOURCE_ATTRIBUTES: at most 64 attributes, got 65',
    );
  });

  it('describes what is exported where in one line', () => {
    const otel = read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none', OTEL_SERVICE_NAME: 'edge' })!;
    expect(describeOtelEnv(otel)).toEqual({
      service: 'edge',
      metrics: 'http://c:4318/v1/metrics (http/protobuf, every 60000 ms)',
      traces: 'off',
    });
  });
});
