/* eslint-disable @typescript-eslint/no-explicit-any -- the assertions read JSON answers dynamically */
/**
 * Fair service per client (remote address) on a real `sluice serve` (the built CLI, so
 * `npm run build` first), on the embedded store and on Redis: a dozen addresses cannot fill the
 * wait table or the gRPC listener's connections for another address; HTTP/2 calls whose answers
 * the peer never reads (flow-control window 0) are cut, and what one address holds of them is
 * bounded; a client flooding batches leaves its neighbour's calls answered while the flood runs,
 * and its own queue beyond its bound is refused with a stable code. What is asserted is who is
 * answered and how much is held, never a duration (the bench measures rates and latencies).
 */
import { connect as h2connect, constants as h2, type ClientHttp2Session } from 'node:http2';
import { Agent, request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { loadRlsDefinition } from '../../packages/server/test/support.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../env.js';
import { rulesFile, spawnSluice, storeFlags, type Serve, type TestStore, metric } from '../sluice-serve.js';

const RULES = `
resources:
  api:held: { limits: { algorithm: gcra, limit: 1, windowMs: 100000, burst: 1 } }
  api:paced: { limits: { algorithm: gcra, limit: 5, windowMs: 1000, burst: 1 } }
  api:fixed: { limits: { algorithm: fixed-window, limit: 1000000000, windowMs: 60000 } }
domains:
  - domain: fair
    descriptors:
      - key: route
        rate_limit: { unit: hour, requests_per_unit: 1000000000 }
`;

/** A bound on a hang, not an expected duration. */
const GUARD_MS = 30_000;
/** The addresses of the hostile clients: 127.0.0.11 ... 127.0.0.21. */
const HOSTILE = Array.from({ length: 11 }, (_, i) => `127.0.0.${11 + i}`);
const VICTIM = '127.0.0.30';
const STORES: TestStore[] = ['memory', 'redis'];

/** A POST with a JSON body from `localAddress` on a connection of its own (or of `agent`). */
function post(
  base: string,
  path: string,
  body: unknown,
  localAddress: string,
  agent: Agent | false = false,
): Promise<{ status: number; json: any }> {
  const text = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(new URL(path, base), {
      method: 'POST',
      agent,
      localAddress,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (data += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(data) }));
    });
    req.end(text);
  });
}

/**
 * POSTs `bodies` to `path` at once from `localAddress`, each on a connection of its own: every
 * request is sent but for its last byte, and once all are, the last bytes together, so that the
 * server reads them all in the same turn. Resolves with each answer's status and JSON body.
 */
async function postTogether(
  base: string,
  path: string,
  bodies: unknown[],
  localAddress: string,
): Promise<{ status: number; json: any }[]> {
  const { hostname, port } = new URL(base);
  const sockets = await Promise.all(
    bodies.map(
      () =>
        new Promise<Socket>((resolve, reject) => {
          const s = connect({ host: hostname, port: Number(port), localAddress }, () => resolve(s));
          s.once('error', reject);
        }),
    ),
  );
  const texts = bodies.map((b) => JSON.stringify(b));
  const answers = sockets.map(
    (s) =>
      new Promise<{ status: number; json: any }>((resolve, reject) => {
        let data = '';
        s.setEncoding('utf8');
        s.on('data', (c: string) => (data += c));
        s.once('error', reject);
        s.once('end', () => {
          const [head = '', body = ''] = data.split('\r\n\r\n');
          resolve({ status: Number(head.split(' ')[1]), json: JSON.parse(body) });
        });
      }),
  );
  const requests = texts.map(
    (t) =>
      `POST ${path} HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(t)}\r\nConnection: close\r\n\r\n${t}`,
  );
  requests.forEach((r, i) => sockets[i]!.write(r.slice(0, -1)));
  await new Promise((r) => setTimeout(r, 200));
  requests.forEach((r, i) => sockets[i]!.write(r.slice(-1)));
  return Promise.all(answers);
}

async function until(probe: () => Promise<boolean> | boolean, what: string): Promise<void> {
  const deadline = Date.now() + GUARD_MS * 2;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const rls = loadRlsDefinition().ShouldRateLimit!;
/** A framed ShouldRateLimit message on the domain of {@link RULES}. */
function rlsMessage(value: string): Buffer {
  const bytes = rls.requestSerialize({ domain: 'fair', descriptors: [{ entries: [{ key: 'route', value }] }] });
  const frame = Buffer.alloc(5 + bytes.length);
  frame.writeUInt32BE(bytes.length, 1);
  bytes.copy(frame, 5);
  return frame;
}

/** An HTTP/2 connection from `localAddress` (with `settings`, e.g. a zero flow-control window). */
function session(port: number, localAddress: string, settings: Record<string, number> = {}): ClientHttp2Session {
  const s = h2connect(`http://127.0.0.1:${port}`, {
    settings,
    createConnection: () => connect({ port, host: '127.0.0.1', localAddress }),
  });
  s.on('error', () => undefined);
  return s;
}

/** What a call got: its grpc-status ('' when none came), or how its stream was cut. */
type CallEnd = { status: string } | { cut: number };

/** One ShouldRateLimit call on `s`; resolves when its stream closes. */
function rlsCall(s: ClientHttp2Session, value: string, onHeaders?: () => void): Promise<CallEnd> {
  return new Promise((resolve) => {
    const stream = s.request({
      ':method': 'POST',
      ':path': '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
      'content-type': 'application/grpc+proto',
      te: 'trailers',
    });
    let status = '';
    stream.on('response', (headers) => {
      status = String(headers['grpc-status'] ?? '');
      onHeaders?.();
    });
    stream.on('trailers', (trailers) => (status = String(trailers['grpc-status'] ?? status)));
    stream.on('error', () => undefined);
    stream.on('data', () => undefined);
    stream.on('close', () => resolve(stream.rstCode !== h2.NGHTTP2_NO_ERROR ? { cut: stream.rstCode } : { status }));
    stream.end(rlsMessage(value));
  });
}

describe.each(STORES)('fair service per address (%s store)', (store) => {
  const rules = rulesFile(RULES);
  afterAll(() => rules.remove());

  /** `sluice serve` on `store` with the rules above and `env`. */
  const start = (env: Record<string, string>) =>
    spawnSluice(['--rules', rules.path, '--port', '0', '--grpc-port', '0', ...storeFlags(store)], {
      SLUICE_SHUTDOWN_GRACE_MS: '500',
      ...env,
    });

  it("admits a 12th address's acquire to the wait table that 11 addresses filled", async () => {
    // The defaults: 1,000 waits per address, 10,000 waiting keys; waits of up to 120 s.
    const serve = await start({ SLUICE_MAX_WAIT_MS: '120000' });
    try {
      // Each address: 20 batches of 50 keys twice (the first is admitted, the second waits ~100 s).
      const waits = HOSTILE.flatMap((address, a) =>
        Array.from({ length: 20 }, (_, b) => {
          const keys = Array.from({ length: 50 }, (_, k) => `w${a}-${b}-${k}`);
          const items = keys.flatMap((key) => [0, 1].map(() => ({ resource: 'api:held', key, maxWaitMs: 120_000 })));
          return post(serve.url, '/v1/acquire', { items }, address).catch(() => undefined);
        }),
      );
      // 11,000 waits on as many keys: 1,000 beyond the table's 10,000 are turned away.
      await until(
        async () => (await metric(serve.url, 'sluice_rejections_total', 'resource="api:held",reason="queue_full"')) >= 1000,
        'the wait table to fill',
      );
      const key = randomPrefix('victim');
      await post(serve.url, '/v1/check', { resource: 'api:paced', key }, VICTIM);
      const own = await post(serve.url, '/v1/acquire', { resource: 'api:paced', key, maxWaitMs: 20_000 }, VICTIM);
      expect(own.json).toMatchObject({ allowed: true, reason: 'allowed' });
      await serve.stop();
      await Promise.all(waits);
    } finally {
      await serve.stop();
    }
  });

  it("serves a 12th address's gRPC calls when 11 addresses hold every connection of the listener", async () => {
    const serve = await start({ SLUICE_MAX_CONNECTIONS: '110', SLUICE_MAX_CLIENT_CONNS: '10', SLUICE_IDLE_TIMEOUT_MS: '60000' });
    const held: Socket[] = [];
    try {
      for (const address of HOSTILE) {
        for (let i = 0; i < 10; i++) {
          const s = connect({ port: serve.grpcPort, host: '127.0.0.1', localAddress: address });
          s.on('error', () => undefined);
          held.push(s);
        }
      }
      await until(
        async () => (await metric(serve.url, 'sluice_connections_open', 'listener="grpc"')) >= 110,
        'the listener to fill',
      );
      const answers: CallEnd[] = [];
      for (let i = 0; i < 12; i++) {
        const s = session(serve.grpcPort, VICTIM);
        answers.push(await rlsCall(s, `v${i}`));
        s.close();
      }
      expect(answers).toEqual(Array(12).fill({ status: '0' }));
    } finally {
      for (const s of held) s.destroy();
      await serve.stop();
    }
  });

  it('cuts HTTP/2 calls whose answers are never read, and bounds what one address holds of them', async () => {
    // The default bound of calls in progress per address (1,000), answers taken within 1 s.
    const serve = await start({ SLUICE_WRITE_TIMEOUT_MS: '1000', SLUICE_IDLE_TIMEOUT_MS: '60000' });
    const sessions: ClientHttp2Session[] = [];
    try {
      // 100 connections of 100 calls each, none of whose answers can be written.
      let held = 0;
      let most = 0;
      const calls: Promise<CallEnd>[] = [];
      for (let c = 0; c < 100; c++) {
        const s = session(serve.grpcPort, HOSTILE[0]!, { initialWindowSize: 0 });
        sessions.push(s);
        for (let i = 0; i < 100; i++) {
          const answered = rlsCall(s, `z${c}-${i}`, () => (most = Math.max(most, ++held)));
          calls.push(answered);
          void answered.then(() => held > 0 && held--);
        }
      }
      // Answered (headers only), refused or cut: every call ends within the guard.
      const ends = await Promise.race([
        Promise.all(calls),
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), GUARD_MS)),
      ]);
      expect(ends).toBeDefined();
      // None of them got its message, and the server never held more than its bound at once.
      expect(ends!.filter((e) => 'status' in e && e.status === '0')).toEqual([]);
      expect(most).toBeGreaterThan(0);
      expect(most).toBeLessThanOrEqual(1000);
      expect(await metric(serve.url, 'sluice_connections_closed_total', 'reason="write_timeout"')).toBeGreaterThan(0);
      // Another address is served meanwhile.
      const other = session(serve.grpcPort, VICTIM);
      expect(await rlsCall(other, 'ok')).toEqual({ status: '0' });
      other.close();
    } finally {
      for (const s of sessions) s.destroy();
      await serve.stop();
    }
  });

  describe('a client flooding batches', () => {
    let serve: Serve;
    beforeAll(async () => {
      serve = await start({});
    });
    afterAll(async () => {
      await serve?.stop();
    });

    it("answers a neighbour's calls while the flood runs", async () => {
      const flooder = HOSTILE[1]!;
      let floodDone = false;
      let n = 0;
      // 20 connections, 20 batches of 100 new keys each, one after the other.
      const flood = Promise.all(
        Array.from({ length: 20 }, async () => {
          for (let b = 0; b < 20; b++) {
            const items = Array.from({ length: 100 }, () => ({ resource: 'api:fixed', key: `f${n++}` }));
            await post(serve.url, '/v1/check', { items }, flooder);
          }
        }),
      ).finally(() => (floodDone = true));
      let neighbour = 0;
      const neighbourAgent = new Agent({ keepAlive: true, maxSockets: 1 });
      await until(() => n > 0, 'the flood to start');
      while (!floodDone) {
        const r = await post(serve.url, '/v1/check', { resource: 'api:fixed', key: 'neighbour' }, VICTIM, neighbourAgent);
        if (r.status === 200 && r.json.allowed === true) neighbour++;
      }
      await flood;
      neighbourAgent.destroy();
      // The flood's 40,000 items (20 rounds of 20 batches) take turns with the neighbour's calls:
      // one call of the neighbour per round when each turn runs all the batches that had arrived,
      // 100 or more on a quiet machine. On a loaded one a Redis round trip can outlast the wait
      // that keeps a closed loop's turn, and the neighbour then counts as idle: 66-99 were seen,
      // and 23 during a full test run beside other work. What holds on any machine is that the
      // neighbour is answered while the flood runs, not only after it; the share it gets is
      // measured by the bench's abuse part (docs/benchmarks.md).
      expect(neighbour).toBeGreaterThanOrEqual(10);
    });

    it("refuses a client's requests beyond its queue bound with a stable code, and serves the others", async () => {
      const flooder = HOSTILE[2]!;
      const bounded = await start({ SLUICE_MAX_CLIENT_QUEUED: '5' });
      try {
        // 40 batches read in one turn, on 40 connections: more than 5 wait for their turn at once.
        const batches = await postTogether(
          bounded.url,
          '/v1/check',
          Array.from({ length: 40 }, (_, b) => ({
            items: Array.from({ length: 100 }, (_, k) => ({ resource: 'api:fixed', key: `q${b}-${k}` })),
          })),
          flooder,
        );
        const refused = batches.filter((b) => b.status === 429 && b.json.error?.code === 'SLUICE_ERR_CLIENT_BUSY');
        const answered = batches.filter((b) => b.status === 200);
        expect(refused.length).toBeGreaterThan(0);
        expect(refused.length + answered.length).toBe(40);
        // A request refused never started; one let in was decided whole.
        for (const b of answered) expect((b.json.results as { allowed?: boolean }[]).every((r) => r.allowed === true)).toBe(true);
        const other = await post(bounded.url, '/v1/check', { resource: 'api:fixed', key: 'other' }, VICTIM);
        expect(other.json).toMatchObject({ allowed: true });
      } finally {
        await bounded.stop();
      }
    });
  });
});
