/* eslint-disable @typescript-eslint/no-explicit-any, @typescript-eslint/no-unsafe-return --
   the assertions read protobuf answers dynamically */
import { connect, type ClientHttp2Session, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadRlsDefinition } from './proto.js';
import { RlsClient, TOKEN, call, scratch, startTestServer, writeRules, type TestServer } from './support.js';

const RULES = `
domain: edge
descriptors:
  - key: ip
    rate_limit:
      unit: minute
      requests_per_unit: 2
`;

const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const method = loadRlsDefinition().ShouldRateLimit!;

function frame(message: Buffer, flag = 0): Buffer {
  const out = Buffer.alloc(5 + message.length);
  out[0] = flag;
  out.writeUInt32BE(message.length, 1);
  message.copy(out, 5);
  return out;
}

function request(value: string): Buffer {
  return method.requestSerialize({ domain: 'edge', descriptors: [{ entries: [{ key: 'ip', value }] }] });
}

/** What a raw HTTP/2 exchange got back: headers, the body's bytes, trailers (empty for trailers-only). */
interface Answer {
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
  readonly trailers: IncomingHttpHeaders;
}

/** One call over raw HTTP/2: `chunks` are written as they are; `end: false` leaves the request open. */
function exchange(
  session: ClientHttp2Session,
  headers: OutgoingHttpHeaders,
  chunks: readonly Buffer[],
  end = true,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ':method': 'POST',
      ':path': PATH,
      'content-type': 'application/grpc',
      te: 'trailers',
      ...headers,
    });
    let head: IncomingHttpHeaders = {};
    let trailers: IncomingHttpHeaders = {};
    const body: Buffer[] = [];
    stream.on('response', (h) => (head = h));
    stream.on('trailers', (t) => (trailers = t));
    stream.on('data', (d: Buffer) => body.push(d));
    stream.on('close', () => resolve({ headers: head, body: Buffer.concat(body), trailers }));
    stream.on('error', reject);
    for (const c of chunks) stream.write(c);
    if (end) stream.end();
  });
}

/** The gRPC status of an answer: in the trailers, or in the headers of a trailers-only one. */
const statusOf = (a: Answer) => Number(a.trailers['grpc-status'] ?? a.headers['grpc-status']);
const fieldOf = (a: Answer, name: string) => a.trailers[name] ?? a.headers[name];

describe('the gRPC transport (node:http2 with gRPC framing)', () => {
  const tmp = scratch();
  let server: TestServer;
  let session: ClientHttp2Session;

  beforeAll(async () => {
    server = await startTestServer({ rules: [writeRules(tmp.dir, RULES)], maxBodyBytes: '1024', apiToken: TOKEN });
    session = connect(`http://127.0.0.1:${server.grpcPort}`);
  });
  afterAll(async () => {
    session?.close();
    await server?.close();
    tmp.remove();
  });
  const auth = { authorization: `Bearer ${TOKEN}` };

  it('answers a call with headers, one length-prefixed message and grpc-status 0 in the trailers', async () => {
    const a = await exchange(session, auth, [frame(request('raw-ok'))]);
    expect(a.headers[':status']).toBe(200);
    expect(a.headers['content-type']).toBe('application/grpc+proto');
    expect(a.trailers['grpc-status']).toBe('0');
    expect(a.body[0]).toBe(0);
    expect(a.body.readUInt32BE(1)).toBe(a.body.length - 5);
    const decoded = method.responseDeserialize(a.body.subarray(5)) as any;
    expect(decoded.overall_code).toBe('OK');
    expect(decoded.statuses[0].limit_remaining).toBe(1);
  });

  it('takes a message split across DATA frames, and its prefix split too', async () => {
    const whole = frame(request('split'));
    const a = await exchange(session, auth, [whole.subarray(0, 3), whole.subarray(3, 9), whole.subarray(9)]);
    expect(statusOf(a)).toBe(0);
    expect((method.responseDeserialize(a.body.subarray(5)) as any).overall_code).toBe('OK');
  });

  it('refuses calls without the bearer token UNAUTHENTICATED, with the Sluice code', async () => {
    const a = await exchange(session, {}, [frame(request('no-token'))]);
    expect(statusOf(a)).toBe(16);
    expect(fieldOf(a, 'sluice-error-code')).toBe('SLUICE_ERR_UNAUTHORIZED');
    const wrong = await exchange(session, { authorization: 'Bearer wrong' }, [frame(request('no-token'))]);
    expect(statusOf(wrong)).toBe(16);
  });

  it('answers other methods UNIMPLEMENTED and other content types 415', async () => {
    const other = await exchange(session, { ...auth, ':path': '/envoy.service.ratelimit.v3.RateLimitService/Other' }, [
      frame(request('x')),
    ]);
    expect(statusOf(other)).toBe(12);
    const json = await exchange(session, { ...auth, 'content-type': 'application/json' }, [Buffer.from('{}')]);
    expect(json.headers[':status']).toBe(415);
  });

  it('refuses compressed messages: UNIMPLEMENTED for an unsupported grpc-encoding, INTERNAL without one', async () => {
    const gzip = await exchange(session, { ...auth, 'grpc-encoding': 'gzip' }, [frame(request('gz'), 1)]);
    expect(statusOf(gzip)).toBe(12);
    expect(fieldOf(gzip, 'grpc-accept-encoding')).toBe('identity');
    const bare = await exchange(session, auth, [frame(request('gz'), 1)]);
    expect(statusOf(bare)).toBe(13);
  });

  it('refuses a message declared larger than the bound RESOURCE_EXHAUSTED, before reading it', async () => {
    const head = Buffer.from([0, 0, 0, 0x10, 0]); // 4096 bytes announced, none sent
    const a = await exchange(session, auth, [head], false);
    expect(statusOf(a)).toBe(8);
    expect(fieldOf(a, 'sluice-error-code')).toBe('SLUICE_ERR_BODY_TOO_LARGE');
  });

  it('answers an empty body, a truncated message and two messages INVALID_ARGUMENT', async () => {
    const msg = frame(request('two'));
    for (const chunks of [[], [msg.subarray(0, msg.length - 1)], [msg, msg]]) {
      const a = await exchange(session, auth, chunks);
      expect(statusOf(a)).toBe(3);
      expect(fieldOf(a, 'sluice-error-code')).toBe('SLUICE_ERR_MALFORMED_BODY');
    }
  });

  it('keeps the grpc-timeout deadline of a call whose message never completes (DEADLINE_EXCEEDED)', async () => {
    const a = await exchange(session, { ...auth, 'grpc-timeout': '50m' }, [Buffer.from([0, 0, 0])], false);
    expect(statusOf(a)).toBe(4);
  });

  it('serves @grpc/grpc-js clients: decisions, errors with the sluice-error-code trailer, other methods', async () => {
    const client = new RlsClient(`127.0.0.1:${server.grpcPort}`, `Bearer ${TOKEN}`);
    try {
      const ask = () => client.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'ip', value: 'js' }] }] });
      expect((await ask()).overall_code).toBe('OK');
      expect((await ask()).overall_code).toBe('OK');
      expect((await ask()).overall_code).toBe('OVER_LIMIT');
      const bad = await client.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: [] }] });
      expect(bad.error).toMatchObject({ code: 3, sluice: 'SLUICE_ERR_INVALID_REQUEST' });
      expect(bad.error.details).toBe('SLUICE_ERR_INVALID_REQUEST: descriptors[0].entries: must have at least one entry');
    } finally {
      client.close();
    }
    const unknown = new grpc.Client(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
    try {
      const err = await new Promise<grpc.ServiceError | null>((resolve) =>
        unknown.makeUnaryRequest(
          '/x.Y/Z',
          (b: Buffer) => b,
          (b: Buffer) => b,
          Buffer.alloc(0),
          (e) => resolve(e),
        ),
      );
      expect(err?.code).toBe(grpc.status.UNIMPLEMENTED);
    } finally {
      unknown.close();
    }
    const metrics = (await call(server.url, '/metrics')).json as string;
    expect(metrics).toMatch(/^sluice_grpc_requests_total\{method="ShouldRateLimit",code="0"\} [1-9]/m);
  });
});
