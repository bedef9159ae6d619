/**
 * An OpenTelemetry Collector of a test's own (scripts/otelcol.sh builds it): OTLP/HTTP in on a
 * free loopback port, everything it receives forwarded as OTLP/HTTP JSON to a sink in the test,
 * which keeps each request's body. The collector decodes what Sluice sends (protobuf) and
 * encodes it again, so what the sink holds is what a real pipeline would have accepted.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { otelcolBinary } from './env.js';
import { freePort } from './prometheus.js';

/** An OTLP attribute value as OTLP/JSON writes it. */
export interface AnyValue {
  stringValue?: string;
  intValue?: string;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: AnyValue[] };
}
export interface KeyValue {
  key: string;
  value: AnyValue;
}
export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: KeyValue[];
  status?: { code?: number; message?: string };
}
export interface OtlpMetric {
  name: string;
  description?: string;
  unit?: string;
  sum?: { aggregationTemporality?: number; isMonotonic?: boolean; dataPoints?: NumberPoint[] };
  gauge?: { dataPoints?: NumberPoint[] };
  histogram?: { aggregationTemporality?: number; dataPoints?: HistogramPoint[] };
}
export interface NumberPoint {
  attributes?: KeyValue[];
  asDouble?: number;
  asInt?: string;
}
export interface HistogramPoint {
  attributes?: KeyValue[];
  count?: string;
  sum?: number;
  bucketCounts?: string[];
  explicitBounds?: number[];
}
export interface ResourceOf<T> {
  resource?: { attributes?: KeyValue[] };
  items: T[];
}

/** A plain value of an OTLP/JSON attribute value. */
export function plain(v: AnyValue | undefined): unknown {
  if (v === undefined) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(plain);
  return undefined;
}

/** Attributes as a plain object. */
export function attributesOf(kvs: KeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((kvs ?? []).map((kv) => [kv.key, plain(kv.value)]));
}

/** A running collector and the sink behind it. */
export interface Collector {
  /** The collector's OTLP/HTTP base URL (what OTEL_EXPORTER_OTLP_ENDPOINT takes). */
  readonly endpoint: string;
  /** Every request the sink received so far, by path (`/v1/metrics`, `/v1/traces`). */
  readonly received: { path: string; body: unknown }[];
  /** Every span received, with its resource. */
  spans(): ResourceOf<OtlpSpan>[];
  /** The metrics of each export, in the order they came. */
  metricExports(): ResourceOf<OtlpMetric>[];
  stop(): Promise<void>;
}

function sink(received: { path: string; body: unknown }[]): Promise<Server> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        received.push({ path: req.url ?? '', body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } catch {
        res.writeHead(400).end();
      }
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

function accepting(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Starts a sink and a collector forwarding to it; resolves once the collector accepts connections. */
export async function startCollector(): Promise<Collector> {
  const received: { path: string; body: unknown }[] = [];
  const server = await sink(received);
  const sinkPort = (server.address() as AddressInfo).port;
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'sluice-otelcol-'));
  const config = join(dir, 'config.yaml');
  writeFileSync(
    config,
    `receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:${port}
exporters:
  otlp_http:
    endpoint: http://127.0.0.1:${sinkPort}
    encoding: json
    compression: none
    retry_on_failure:
      enabled: false
    sending_queue:
      enabled: false
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    metrics: { receivers: [otlp], exporters: [otlp_http] }
    traces: { receivers: [otlp], exporters: [otlp_http] }
`,
  );
  const logs: string[] = [];
  const child: ChildProcess = spawn(otelcolBinary(), ['--config', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  child.stderr!.setEncoding('utf8').on('data', (c: string) => logs.push(c));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 30_000;
  while (!(await accepting(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`the collector did not start:\n${logs.join('')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const bodies = (path: string) => received.filter((r) => r.path === path).map((r) => r.body);
  return {
    endpoint: `http://127.0.0.1:${port}`,
    received,
    spans: () =>
      bodies('/v1/traces').flatMap((b) =>
        (
          (b as { resourceSpans?: { resource?: ResourceOf<OtlpSpan>['resource']; scopeSpans?: { spans?: OtlpSpan[] }[] }[] })
            .resourceSpans ?? []
        ).map((rs) => ({
          resource: rs.resource,
          items: (rs.scopeSpans ?? []).flatMap((s) => s.spans ?? []),
        })),
      ),
    metricExports: () =>
      bodies('/v1/metrics').flatMap((b) =>
        (
          (
            b as {
              resourceMetrics?: { resource?: ResourceOf<OtlpMetric>['resource']; scopeMetrics?: { metrics?: OtlpMetric[] }[] }[];
            }
          ).resourceMetrics ?? []
        ).map((rm) => ({
          resource: rm.resource,
          items: (rm.scopeMetrics ?? []).flatMap((s) => s.metrics ?? []),
        })),
      ),
    stop,
  };
}
