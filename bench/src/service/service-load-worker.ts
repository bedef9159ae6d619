/**
 * A load-client process of the service part: on `config` it connects (a @grpc/grpc-js channel,
 * one HTTP/2 session speaking gRPC's framing directly, or an undici pool of keep-alive HTTP
 * connections) and checks one call's answer; on `go` it keeps
 * `inFlight` calls outstanding for the warm-up and the measured time, and reports what completed
 * inside the measured window, the latency of each such call and its own CPU time.
 *
 * Requests are encoded once before the run and answers are checked by their first bytes (gRPC)
 * or parsed (HTTP), so that the load costs as little CPU as the client library allows: the
 * machine's cores are shared with the server under test.
 */
import { connect, constants as h2, type IncomingHttpHeaders } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Pool } from 'undici';
import { loadRlsMethod, type LoadConfig, type LoadResult, type ToLoadWorker } from './service-load.js';

type Call = () => Promise<boolean>;

function send(message: unknown): void {
  process.send!(message);
}

interface Client {
  /** One call; resolves true when every decision in it allowed. */
  readonly call: (seq: number) => Promise<boolean>;
  close(): Promise<void>;
}

/** The RateLimitRequests of the run, serialized once (one descriptor, one entry each). */
function rlsRequests(c: LoadConfig, method: protoLoader.MethodDefinition<object, object>): Buffer[] {
  return Array.from({ length: c.keys }, (_, i) =>
    method.requestSerialize({
      domain: c.domain,
      descriptors: [{ entries: [{ key: c.descriptorKey, value: `u${c.keyOffset + i}` }] }],
    }),
  );
}

/**
 * A RateLimitResponse that starts with field 1 (overall_code) = 1 (OK); protobuf writers emit
 * fields in number order, and anything else is decoded in full to say what it was.
 */
function rlsAllowed(method: protoLoader.MethodDefinition<object, object>, b: Buffer): boolean {
  if (b.length >= 2 && b[0] === 0x08 && b[1] === 0x01) return true;
  const decoded = method.responseDeserialize(b) as { overall_code?: string };
  if (decoded.overall_code === 'OVER_LIMIT') return false;
  throw new Error(`unexpected RateLimitResponse ${JSON.stringify(decoded).slice(0, 200)}`);
}

function grpcClient(c: LoadConfig): Client {
  const method = loadRlsMethod(c.protoDir);
  const requests = rlsRequests(c, method);
  const client = new grpc.Client(c.target, grpc.credentials.createInsecure());
  const call = (seq: number) =>
    new Promise<boolean>((resolve, reject) => {
      client.makeUnaryRequest(
        method.path,
        (b: Buffer) => b,
        (b: Buffer) => b,
        requests[seq % requests.length]!,
        (err: grpc.ServiceError | null, res?: Buffer) => {
          if (err !== null || res === undefined) {
            reject(err ?? new Error('no response'));
            return;
          }
          try {
            resolve(rlsAllowed(method, res));
          } catch (e) {
            reject(e instanceof Error ? e : new Error(String(e)));
          }
        },
      );
    });
  return {
    call,
    close: async () => {
      client.close();
      await Promise.resolve();
    },
  };
}

/**
 * gRPC without a gRPC client library: one HTTP/2 session, each call a stream carrying the
 * pre-framed message (1 byte uncompressed flag, 4 bytes length, the message), answered when the
 * trailers say `grpc-status: 0`. It costs the load a fraction of what @grpc/grpc-js's call stack
 * does, so the server's share of the cores shows.
 */
function h2GrpcClient(c: LoadConfig): Client {
  const method = loadRlsMethod(c.protoDir);
  const frames = rlsRequests(c, method).map((m) => {
    const frame = Buffer.alloc(5 + m.length);
    frame.writeUInt32BE(m.length, 1);
    m.copy(frame, 5);
    return frame;
  });
  const session = connect(`http://${c.target}`);
  // A failed session fails its streams; the session's own error must not end the process.
  session.on('error', () => undefined);
  const headers = {
    [h2.HTTP2_HEADER_METHOD]: 'POST',
    [h2.HTTP2_HEADER_PATH]: method.path,
    [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc',
    [h2.HTTP2_HEADER_TE]: 'trailers',
  };
  const call = (seq: number) =>
    new Promise<boolean>((resolve, reject) => {
      const stream = session.request(headers);
      const chunks: Buffer[] = [];
      let status: string | undefined;
      let message: string | undefined;
      stream.on('response', (h) => {
        // A call refused at once comes back as headers only ("trailers-only").
        if (h['grpc-status'] !== undefined) status = String(h['grpc-status']);
      });
      stream.on('trailers', (t: IncomingHttpHeaders) => {
        status = String(t['grpc-status']);
        message = t['grpc-message'] === undefined ? undefined : String(t['grpc-message']);
      });
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('error', reject);
      stream.on('end', () => {
        if (status !== '0') {
          reject(
            new Error(`grpc-status ${status ?? 'missing'}${message === undefined ? '' : `: ${decodeURIComponent(message)}`}`),
          );
          return;
        }
        const body = Buffer.concat(chunks);
        if (body.length < 5 || body[0] !== 0 || body.readUInt32BE(1) !== body.length - 5) {
          reject(new Error(`malformed gRPC response frame (${body.length} bytes)`));
          return;
        }
        try {
          resolve(rlsAllowed(method, body.subarray(5)));
        } catch (e) {
          reject(e instanceof Error ? e : new Error(String(e)));
        }
      });
      stream.end(frames[seq % frames.length]!);
    });
  return {
    call,
    close: () => new Promise<void>((resolve) => session.close(() => resolve())),
  };
}

function httpClient(c: LoadConfig): Client {
  const pool = new Pool(c.target, { connections: c.inFlight, pipelining: 1 });
  const item = (i: number) => `{"resource":"${c.resource}","key":"k${c.keyOffset + (i % c.keys)}"}`;
  // Bodies built once, covering up to 10,000 keys (cycled through; the server sees each key again
  // after that many items).
  const bodies = Array.from({ length: Math.ceil(Math.min(c.keys, 10_000) / Math.max(1, c.batch)) }, (_, n) =>
    c.batch === 0 ? item(n) : `{"items":[${Array.from({ length: c.batch }, (_, j) => item(n * c.batch + j)).join(',')}]}`,
  );
  const path = '/v1/check';
  const headers = { 'content-type': 'application/json' };
  const call = async (seq: number): Promise<boolean> => {
    const res = await pool.request({ path, method: 'POST', headers, body: bodies[seq % bodies.length]! });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
    const body = JSON.parse(text) as { allowed?: boolean; results?: { allowed?: boolean; error?: { code: string } }[] };
    if (c.batch === 0) {
      if (typeof body.allowed !== 'boolean') throw new Error(`unexpected answer ${text.slice(0, 200)}`);
      return body.allowed;
    }
    const results = body.results ?? [];
    const failed = results.find((r) => typeof r.allowed !== 'boolean');
    if (results.length !== c.batch || failed !== undefined) throw new Error(`unexpected batch answer ${text.slice(0, 200)}`);
    return results.every((r) => r.allowed === true);
  };
  return { call, close: () => pool.close() };
}

async function run(call: Call, c: LoadConfig, warmupMs: number, measureMs: number): Promise<LoadResult> {
  const start = performance.now();
  const measureFrom = start + warmupMs;
  const end = measureFrom + measureMs;
  const latencies: number[] = [];
  let calls = 0;
  let completed = 0;
  let denied = 0;
  let errors = 0;
  let firstError: string | undefined;
  let cpuFrom: NodeJS.CpuUsage | undefined;
  const cpuTimer = setTimeout(() => (cpuFrom = process.cpuUsage()), warmupMs);
  const caller = async (): Promise<void> => {
    for (;;) {
      const t0 = performance.now();
      if (t0 >= end) return;
      let allowed: boolean;
      try {
        allowed = await call();
      } catch (err) {
        errors++;
        firstError ??= err instanceof Error ? err.message : String(err);
        // A refused call may come back at once: pause so a failing server is not spun on.
        await new Promise((r) => setTimeout(r, 1));
        continue;
      }
      const t1 = performance.now();
      completed++;
      if (t1 >= measureFrom && t1 < end) {
        calls++;
        if (!allowed) denied++;
        latencies.push((t1 - t0) * 1000);
      }
    }
  };
  await Promise.all(Array.from({ length: c.inFlight }, caller));
  clearTimeout(cpuTimer);
  const cpu = process.cpuUsage(cpuFrom);
  return {
    calls,
    completed,
    denied,
    errors,
    firstError,
    latenciesUs: Float64Array.from(latencies),
    cpuUs: cpu.user + cpu.system,
    measuredMs: Math.min(performance.now(), end) - measureFrom,
  };
}

let client: Client | undefined;
let seq = 0;
/** Calls answered before the run (the check on `config`), counted in the run's `completed`. */
let answeredBefore = 0;

process.on('message', (m: ToLoadWorker) => {
  const handle = async () => {
    if (m.type === 'config') {
      const k = m.config.kind;
      client = k === 'grpc' ? grpcClient(m.config) : k === 'grpc-h2' ? h2GrpcClient(m.config) : httpClient(m.config);
      // One call before the run: a server that answers wrongly fails here, not as a run of errors.
      await client.call(seq++);
      answeredBefore++;
      send({ type: 'ready' });
      return;
    }
    if (m.type === 'go') {
      const c = client!;
      const measured = await run(() => c.call(seq++), m.config, m.warmupMs, m.measureMs);
      const result = { ...measured, completed: measured.completed + answeredBefore };
      await c.close();
      send({ type: 'result', result });
    }
  };
  handle().catch((err: unknown) => {
    send({ type: 'failed', error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
  });
});
