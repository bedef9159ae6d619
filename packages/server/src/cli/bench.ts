import { Agent, request as httpRequest } from 'node:http';
import {
  connect,
  constants as h2,
  type ClientHttp2Session,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
} from 'node:http2';
import { UnaryReader, frameMessage, type ReadResult } from '../grpc/framing.js';
import { RLS_PATH } from '../grpc/proto.js';
import { readOverallCode, writeRateLimitRequest } from '../grpc/wire.js';
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

/** A load's calls, and how to end it: what it opened is closed, calls still unanswered fail. */
interface Check {
  readonly call: () => Promise<boolean>;
  close(): void;
}

function httpCheck(server: string, resource: string, keys: number, token: string | undefined): Check {
  const url = new URL('/v1/check', server);
  const agent = new Agent({ keepAlive: true, maxSockets: 1024 });
  let n = 0;
  const call = () =>
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
          res.on('error', reject);
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
  return { call, close: () => agent.destroy() };
}

/** `RateLimitResponse.Code` OVER_LIMIT. */
const OVER_LIMIT = 2;
/** The largest response read (as gRPC clients' default); a RateLimitResponse of one descriptor is tens of bytes. */
const MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

/**
 * Calls of Envoy's `RateLimitService/ShouldRateLimit`, gRPC over `node:http2` with the framing of
 * ../grpc/framing.ts: the request is encoded and framed once, each call is a stream carrying it,
 * and a call succeeds when the answer is HTTP 200 with `grpc-status: 0` and one
 * `RateLimitResponse`, denied when its `overall_code` is OVER_LIMIT. The calls share one HTTP/2
 * session, replaced by a new one once the server closes it (at its connection age, say).
 */
class GrpcCheck implements Check {
  readonly #authority: string;
  readonly #headers: OutgoingHttpHeaders;
  readonly #frame: Buffer;
  readonly #sessions = new Set<ClientHttp2Session>();
  #session: ClientHttp2Session | undefined;
  #closed = false;

  constructor(authority: string, request: Buffer, token: string | undefined) {
    this.#authority = authority;
    this.#frame = frameMessage(request);
    this.#headers = {
      [h2.HTTP2_HEADER_METHOD]: 'POST',
      [h2.HTTP2_HEADER_PATH]: RLS_PATH,
      [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc+proto',
      [h2.HTTP2_HEADER_TE]: 'trailers',
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
    };
  }

  #current(): ClientHttp2Session {
    const open = this.#session;
    if (open !== undefined && !open.closed && !open.destroyed) return open;
    const session = connect(this.#authority);
    // A failed session fails its streams, each counted as an error; its own error must not end the process.
    session.on('error', () => undefined);
    session.once('close', () => this.#sessions.delete(session));
    this.#sessions.add(session);
    this.#session = session;
    return session;
  }

  readonly call = (): Promise<boolean> =>
    new Promise<boolean>((resolvePromise, reject) => {
      if (this.#closed) throw new Error('the load has ended');
      const stream = this.#current().request(this.#headers);
      const reader = new UnaryReader(MAX_RESPONSE_BYTES);
      let refused: ReadResult | undefined;
      let httpStatus: number | undefined;
      let grpcStatus: string | undefined;
      let grpcMessage: string | undefined;
      const statusOf = (h: IncomingHttpHeaders) => {
        if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
        if (h['grpc-message'] !== undefined) grpcMessage = String(h['grpc-message']);
      };
      stream.on('response', (h) => {
        httpStatus = Number(h[h2.HTTP2_HEADER_STATUS]);
        // A call refused at once is answered by headers alone ("trailers-only").
        statusOf(h);
      });
      stream.on('trailers', statusOf);
      stream.on('data', (chunk: Buffer) => {
        refused ??= reader.push(chunk);
      });
      stream.on('error', reject);
      stream.on('end', () => {
        if (httpStatus !== 200) return reject(new Error(`HTTP status ${httpStatus}`));
        if (grpcStatus !== '0') {
          const why = grpcMessage === undefined ? '' : `: ${decodeURIComponent(grpcMessage)}`;
          return reject(new Error(`grpc-status ${grpcStatus ?? 'missing'}${why}`));
        }
        const read = refused ?? reader.end();
        if (read.kind !== 'message') return reject(new Error(`not one RateLimitResponse: ${read.kind}`));
        try {
          resolvePromise(readOverallCode(read.message) === OVER_LIMIT);
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
      // Reset or cut before it ended (after 'end' this settles nothing).
      stream.on('close', () => reject(new Error(`the call was closed (HTTP/2 code ${stream.rstCode})`)));
      stream.end(this.#frame);
    });

  close(): void {
    this.#closed = true;
    for (const session of this.#sessions) session.destroy();
  }
}

/** `HOST:PORT` (a name, an IPv4 address or a bracketed IPv6 one) as an `http://` origin. */
export function grpcAuthority(target: string): string {
  const url = URL.canParse(`http://${target}`) ? new URL(`http://${target}`) : undefined;
  if (
    url === undefined ||
    url.username !== '' ||
    url.password !== '' ||
    url.pathname !== '/' ||
    url.search !== '' ||
    url.hash !== '' ||
    !/:\d+$/.test(target)
  ) {
    throw new CliError(`--grpc ${JSON.stringify(target)}: expected HOST:PORT`, 2);
  }
  return url.origin;
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

/** A call still unanswered this long after the run's end is cut (and counted as an error). */
const LAST_CALL_GRACE_MS = 10_000;

/** {@link load} with `check`'s calls, closing it after; calls hanging past the run's end are cut. */
async function run(check: Check, concurrency: number, seconds: number): Promise<BenchResult> {
  const cut = setTimeout(() => check.close(), seconds * 1000 + LAST_CALL_GRACE_MS);
  try {
    return await load(check.call, concurrency, seconds);
  } finally {
    clearTimeout(cut);
    check.close();
  }
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
  // Every usage error before any load.
  let grpc: { authority: string; request: Buffer } | undefined;
  if (o.grpc !== undefined) {
    const entries = o.descriptor.map((kv) => {
      const i = kv.indexOf('=');
      if (i <= 0) throw new CliError(`--descriptor ${JSON.stringify(kv)}: expected key=value`, 2);
      return { key: kv.slice(0, i), value: kv.slice(i + 1) };
    });
    if (entries.length === 0) throw new CliError('--grpc needs at least one --descriptor key=value', 2);
    grpc = { authority: grpcAuthority(o.grpc), request: writeRateLimitRequest({ domain: o.domain, descriptors: [{ entries }] }) };
  }
  if (o.server !== undefined) {
    print(
      out,
      `HTTP  ${o.server} /v1/check ${o.resource}, ${o.concurrency} in flight`,
      await run(httpCheck(o.server, o.resource, o.keys, o.token), o.concurrency, o.seconds),
    );
  }
  if (grpc !== undefined) {
    print(
      out,
      `gRPC  ${o.grpc} ShouldRateLimit ${o.domain}, ${o.concurrency} in flight`,
      await run(new GrpcCheck(grpc.authority, grpc.request, o.token), o.concurrency, o.seconds),
    );
  }
}
