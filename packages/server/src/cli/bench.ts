import { Agent, request as httpRequest } from 'node:http';
import * as grpc from '@grpc/grpc-js';
import { loadRlsDefinition } from '../grpc/proto.js';
import { CliError } from './client.js';
import type { Out } from './rules.js';

/** Latency figures of a run. */
export interface BenchResult {
  readonly calls: number;
  readonly errors: number;
  readonly denied: number;
  readonly seconds: number;
  readonly perSecond: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
}

/** The q-quantile of sorted values. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** Runs `concurrency` loops of `call` for `seconds`; each call resolves to whether it was denied. */
export async function load(call: () => Promise<boolean>, concurrency: number, seconds: number): Promise<BenchResult> {
  const latencies: number[] = [];
  let errors = 0;
  let denied = 0;
  const started = performance.now();
  const end = started + seconds * 1000;
  const loop = async () => {
    while (performance.now() < end) {
      const t = performance.now();
      try {
        if (await call()) denied++;
        latencies.push(performance.now() - t);
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return {
    calls: latencies.length,
    errors,
    denied,
    seconds: elapsed,
    perSecond: latencies.length / elapsed,
    p50Ms: quantile(latencies, 0.5),
    p99Ms: quantile(latencies, 0.99),
  };
}

function httpCheck(server: string, resource: string, keys: number, token: string | undefined): () => Promise<boolean> {
  const url = new URL('/v1/check', server);
  const agent = new Agent({ keepAlive: true, maxSockets: 1024 });
  let n = 0;
  return () =>
    new Promise<boolean>((resolvePromise, reject) => {
      const body = JSON.stringify({ resource, key: `k${n++ % keys}` });
      const req = httpRequest(
        url,
        {
          method: 'POST',
          agent,
          headers: {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
            ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            if (res.statusCode !== 200) {
              reject(new Error(`status ${res.statusCode}`));
              return;
            }
            resolvePromise(!(JSON.parse(Buffer.concat(chunks).toString('utf8')) as { allowed: boolean }).allowed);
          });
        },
      );
      req.on('error', reject);
      req.end(body);
    });
}

function grpcCheck(
  target: string,
  domain: string,
  entries: { key: string; value: string }[],
  token: string | undefined,
): () => Promise<boolean> {
  const def = loadRlsDefinition();
  const method = def.ShouldRateLimit!;
  const client = new grpc.Client(target, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  if (token !== undefined) metadata.set('authorization', `Bearer ${token}`);
  return () =>
    new Promise<boolean>((resolvePromise, reject) => {
      client.makeUnaryRequest(
        method.path,
        (x: object) => method.requestSerialize(x),
        (b: Buffer) => method.responseDeserialize(b),
        { domain, descriptors: [{ entries }] },
        metadata,
        (err: grpc.ServiceError | null, res?: unknown) => {
          if (err) reject(err);
          else resolvePromise((res as { overall_code: string }).overall_code === 'OVER_LIMIT');
        },
      );
    });
}

/** Options of {@link runBench}. */
export interface BenchOptions {
  readonly server?: string;
  readonly grpc?: string;
  readonly resource: string;
  readonly domain: string;
  readonly descriptor: readonly string[];
  readonly keys: number;
  readonly concurrency: number;
  readonly seconds: number;
  /** The server's data-plane token (`--api-token`), if it requires one. */
  readonly token?: string | undefined;
}

function print(out: Out, what: string, r: BenchResult): void {
  out.log(
    `${what}: ${r.perSecond.toFixed(0)} decisions/s over ${r.seconds.toFixed(1)} s (${r.calls} calls, ${r.denied} denied, ${r.errors} errors), p50 ${r.p50Ms.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms`,
  );
}

/**
 * `sluice bench`: a keep-alive load against a running server (HTTP and/or gRPC) printing
 * decisions/s and p99. (The repository's benchmark against its peers is `npm run bench`.)
 */
export async function runBench(o: BenchOptions, out: Out): Promise<void> {
  if (o.server === undefined && o.grpc === undefined) {
    throw new CliError(
      'give the server to load: --server URL and/or --grpc HOST:PORT (the repository benchmark is npm run bench)',
      2,
    );
  }
  if (o.server !== undefined) {
    print(
      out,
      `HTTP  ${o.server} /v1/check ${o.resource}, ${o.concurrency} in flight`,
      await load(httpCheck(o.server, o.resource, o.keys, o.token), o.concurrency, o.seconds),
    );
  }
  if (o.grpc !== undefined) {
    const entries = o.descriptor.map((kv) => {
      const i = kv.indexOf('=');
      if (i <= 0) throw new CliError(`--descriptor ${JSON.stringify(kv)}: expected key=value`, 2);
      return { key: kv.slice(0, i), value: kv.slice(i + 1) };
    });
    if (entries.length === 0) throw new CliError('--grpc needs at least one --descriptor key=value', 2);
    print(
      out,
      `gRPC  ${o.grpc} ShouldRateLimit ${o.domain}, ${o.concurrency} in flight`,
      await load(grpcCheck(o.grpc, o.domain, entries, o.token), o.concurrency, o.seconds),
    );
  }
}
