/**
 * Attacks on the connections, waits and logs of a real `sluice serve` (the built CLI, so
 * `npm run build` first), on the embedded store and on Redis: stalled requests, connection
 * floods, one client filling the wait queues, wide batches of waits, refused admin calls with a
 * token in the URL, a malformed request pipelined between good ones, and bodies in UTF-16.
 * Every figure asserted is a behaviour (who is answered, what is logged), never a duration.
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../env.js';
import { rulesFile, spawnSluice, storeFlags, type Serve, type TestStore, metric } from '../sluice-serve.js';

const RULES = `
resources:
  api:paced: { limits: { algorithm: gcra, limit: 5, windowMs: 1000, burst: 1 } }
  api:fixed: { limits: { algorithm: fixed-window, limit: 1000000, windowMs: 60000 } }
`;

/** Long enough that a loaded machine never hits it by accident; short enough for a test. */
const BODY_TIMEOUT_MS = 1000;
/** A bound on a hang, not an expected duration. */
const GUARD_MS = 20_000;
const CLIENT_CONNS = 150;

/** What a raw connection received before it closed (or the guard elapsed). */
interface Exchange {
  readonly data: string;
  readonly closedByServer: boolean;
}

/** Opens a raw connection from `localAddress`, writes `payload`, reads until the server closes. */
function exchange(port: number, payload: string | undefined, localAddress = '127.0.0.1'): Promise<Exchange> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress });
    let data = '';
    const guard = setTimeout(() => {
      socket.destroy();
      resolve({ data, closedByServer: false });
    }, GUARD_MS);
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (data += chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(guard);
      resolve({ data, closedByServer: true });
    });
    if (payload !== undefined) socket.write(payload);
  });
}

/** The status lines of the answers in `data`, in order. */
const statuses = (data: string) => [...data.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));

/** A POST with a JSON body from `localAddress` on a connection of its own. */
function post(
  base: string,
  path: string,
  body: unknown,
  options: { localAddress?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; json: unknown; headers: IncomingHttpHeaders }> {
  const text = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(new URL(path, base), {
      method: 'POST',
      agent: false,
      localAddress: options.localAddress ?? '127.0.0.1',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...options.headers },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (data += c));
      res.on('end', () => {
        let json: unknown = data;
        try {
          json = JSON.parse(data);
        } catch {
          // Not JSON: kept as text.
        }
        resolve({ status: res.statusCode ?? 0, json, headers: res.headers });
      });
    });
    req.end(text);
  });
}

async function until(probe: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + GUARD_MS * 2;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A request in HTTP/1.1 wire form. */
function wire(method: string, path: string, body?: string, extra = ''): string {
  const head = `${method} ${path} HTTP/1.1\r\nHost: sluice\r\n${extra}`;
  return body === undefined
    ? `${head}\r\n`
    : `${head}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

const STORES: TestStore[] = ['memory', 'redis'];

describe.each(STORES)('sluice serve under abuse (%s store)', (store) => {
  const rules = rulesFile(RULES);
  let serve: Serve;
  let port: number;

  beforeAll(async () => {
    const args = ['--rules', rules.path, '--port', '0', '--grpc-port', '0', ...storeFlags(store)];
    serve = await spawnSluice(args, {
      SLUICE_SHUTDOWN_GRACE_MS: '500',
      SLUICE_BODY_TIMEOUT_MS: String(BODY_TIMEOUT_MS),
      SLUICE_IDLE_TIMEOUT_MS: '2000',
      SLUICE_MAX_CLIENT_CONNS: String(CLIENT_CONNS),
    });
    port = Number(new URL(serve.url).port);
  });
  afterAll(async () => {
    await serve?.stop();
    rules.remove();
  });

  it('answers a request whose body stalls 408 and closes its connection', async () => {
    const stalled = exchange(
      port,
      wire('POST', '/v1/check', undefined, 'Content-Type: application/json\r\nContent-Length: 100\r\n') + '\r\n{"res',
    );
    const silent = exchange(port, undefined);
    const [body, nothing] = await Promise.all([stalled, silent]);
    expect(body.closedByServer).toBe(true);
    expect(statuses(body.data)).toEqual([408]);
    expect(body.data).toContain('"code":"SLUICE_ERR_REQUEST_TIMEOUT"');
    // A connection that never sends a byte is closed on the same bound.
    expect(nothing.closedByServer).toBe(true);
    expect(await metric(serve.url, 'sluice_connections_closed_total', 'reason="request_timeout"')).toBeGreaterThanOrEqual(2);
  });

  it('still answers a wait that outlasts the body timeout (the bound is on receiving, not on answering)', async () => {
    const key = randomPrefix('slow');
    await post(serve.url, '/v1/check', { resource: 'api:paced', key });
    // Eight queued acquires at 5/s: the last is answered well after the body timeout.
    const waits = await Promise.all(
      [1, 2, 3, 4, 5, 6, 7, 8].map(() => post(serve.url, '/v1/acquire', { resource: 'api:paced', key, maxWaitMs: 10_000 })),
    );
    expect(waits.map((w) => w.status)).toEqual(Array(8).fill(200));
    expect(waits.every((w) => (w.json as { allowed: boolean }).allowed)).toBe(true);
  });

  it('closes the connections of one address beyond its cap, and serves other addresses', async () => {
    for (const [listener, target] of [
      ['http', port],
      ['grpc', serve.grpcPort],
    ] as const) {
      const sockets: Socket[] = [];
      let closed = 0;
      await Promise.all(
        Array.from(
          { length: CLIENT_CONNS + 50 },
          () =>
            new Promise<void>((resolve) => {
              const s = connect({ port: target, host: '127.0.0.1', localAddress: '127.0.0.3' }, () => resolve());
              s.on('error', () => resolve());
              s.on('close', () => closed++);
              sockets.push(s);
            }),
        ),
      );
      await until(async () => closed >= 50, `${listener}: the connections over the cap to be closed`);
      // At least one was refused for the cap (idle ones closing meanwhile may free places).
      const refused = await metric(
        serve.url,
        'sluice_connections_closed_total',
        `listener="${listener}",reason="max_connections_per_client"`,
      );
      expect(refused).toBeGreaterThan(0);
      expect(refused).toBeLessThanOrEqual(50);
      // Another address is served meanwhile.
      const other = await post(serve.url, '/v1/check', { resource: 'api:fixed', key: 'k' }, { localAddress: '127.0.0.4' });
      expect(other.status).toBe(200);
      for (const s of sockets) s.destroy();
      expect(closed).toBeLessThanOrEqual(CLIENT_CONNS + 50);
    }
  });

  it("does not let one address's 10,000 waiting acquires refuse another address's acquire", async () => {
    const key = randomPrefix('fair');
    await post(serve.url, '/v1/check', { resource: 'api:paced', key });
    const before = await metric(serve.url, 'sluice_rejections_total', 'resource="api:paced",reason="queue_full"');
    // 100 batches of 100 waits each from one address; its batches answer once all their items have.
    const flood = Array.from({ length: 100 }, () =>
      post(serve.url, '/v1/acquire', {
        items: Array.from({ length: 100 }, () => ({ resource: 'api:paced', key, maxWaitMs: 30_000 })),
      }).catch(() => undefined),
    );
    // Its waits beyond the bounds (1,000 per key, 1,000 per address) are refused at once (some of
    // the 10,000 are served meanwhile, freeing places).
    await until(
      async () =>
        (await metric(serve.url, 'sluice_rejections_total', 'resource="api:paced",reason="queue_full"')) - before >= 8000,
      'the flood to fill the queue',
    );
    const other = await post(
      serve.url,
      '/v1/acquire',
      { resource: 'api:paced', key, maxWaitMs: 15_000 },
      { localAddress: '127.0.0.2' },
    );
    expect(other.json).toMatchObject({ allowed: true, reason: 'allowed' });
    await serve.stop();
    await Promise.all(flood);
  });
});

describe.each(STORES)('sluice serve logs and protocol edges (%s store)', (store) => {
  const rules = rulesFile(RULES);
  let serve: Serve;
  let port: number;

  beforeAll(async () => {
    const args = ['--rules', rules.path, '--port', '0', '--grpc-port', '0', ...storeFlags(store)];
    serve = await spawnSluice(args, { SLUICE_SHUTDOWN_GRACE_MS: '500' });
    port = Number(new URL(serve.url).port);
  });
  afterAll(async () => {
    await serve?.stop();
    rules.remove();
  });

  it('serves a batch of many waiting acquires without a MaxListenersExceededWarning', async () => {
    const key = randomPrefix('batch');
    await post(serve.url, '/v1/check', { resource: 'api:paced', key });
    const batch = await post(serve.url, '/v1/acquire', {
      items: Array.from({ length: 20 }, () => ({ resource: 'api:paced', key, maxWaitMs: 1000 })),
    });
    expect(batch.status).toBe(200);
    expect((batch.json as { results: unknown[] }).results).toHaveLength(20);
    expect(serve.logs.join('\n')).not.toContain('MaxListenersExceededWarning');
  });

  it('answers the requests pipelined before a malformed one, then 400, then closes', async () => {
    const body = JSON.stringify({ resource: 'api:fixed', key: randomPrefix('pipe') });
    const good = wire('POST', '/v1/check', body);
    const bad = wire('GET', '/healthz', undefined, 'Bad Header: y\r\n');
    const answer = await exchange(port, good + good + bad + good);
    expect(answer.closedByServer).toBe(true);
    expect(statuses(answer.data)).toEqual([200, 200, 400]);
  });

  it('refuses JSON in another charset than UTF-8 with 415', async () => {
    const check = (contentType: string) =>
      post(serve.url, '/v1/check', { resource: 'api:fixed', key: 'cs' }, { headers: { 'content-type': contentType } });
    const utf16 = await check('application/json; charset=utf-16');
    expect(utf16.status).toBe(415);
    expect(utf16.json).toMatchObject({ error: { code: 'SLUICE_ERR_UNSUPPORTED_MEDIA_TYPE' } });
    expect((await check('application/json; charset="latin1"')).status).toBe(415);
    expect((await check('application/json; charset=UTF-8')).status).toBe(200);
    expect((await check('application/json')).status).toBe(200);
  });

  it('keeps tokens out of the log and logs a flood of refused admin calls as one line and a summary', async () => {
    const secret = 'query-token-0123456789abcdef';
    const bearer = 'bearer-token-0123456789abcdef';
    const refused = await Promise.all(
      Array.from({ length: 300 }, (_, i) =>
        fetch(new URL(`/v1/admin/rules?token=${secret}&api_key=${secret}&n=${i}`, serve.url), {
          headers: { authorization: `Bearer ${bearer}` },
        }).then((r) => r.status),
      ),
    );
    expect(new Set(refused)).toEqual(new Set([401]));
    expect(await metric(serve.url, 'sluice_warnings_total', 'event="admin_refused"')).toBe(300);
    await serve.stop();
    const log = serve.logs.join('\n');
    expect(log).not.toContain(secret);
    expect(log).not.toContain(bearer);
    const lines = serve.logs.filter((l) => l.includes('admin call refused'));
    // The first in full, then at most one summary per minute (here: the one written at shutdown).
    expect(lines.length).toBeLessThanOrEqual(3);
    const repeated = lines.map((l) => (JSON.parse(l) as { repeated?: number }).repeated ?? 0).reduce((a, b) => a + b, 0);
    expect(repeated + 1).toBe(300);
  });
});
