/**
 * Attacks on the data plane of `sluice serve` by a client that can reach its ports: refunds and
 * lock-outs for keys it does not own. Each runs against the real service, on the embedded store
 * and on Redis.
 */
import { connect } from 'node:net';
import { RemoteLimiter } from '@sluice/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  RlsClient,
  call,
  eventually,
  scratch,
  spawnServer,
  writeRules,
  type ServerProcess,
} from '../../packages/server/test/support.js';
import { storeFlags } from '../sluice-serve.js';
import { clearOfWindowEnd } from '../wait-for.js';

const API_TOKEN = 'data-plane-token-0123456789abcdef';
const WINDOW_MS = 600_000;

// Fifty a key per ten minutes on every algorithm: nothing refills during a test.
const RULES = `
resources:
  api:bucket: { limits: { algorithm: token-bucket, limit: 50, windowMs: ${WINDOW_MS} } }
  api:gcra: { limits: { algorithm: gcra, limit: 50, windowMs: ${WINDOW_MS} } }
  api:fixed: { limits: { algorithm: fixed-window, limit: 50, windowMs: ${WINDOW_MS} } }
  api:log: { limits: { algorithm: sliding-log, limit: 50, windowMs: ${WINDOW_MS} } }
  api:window: { limits: { algorithm: sliding-window, limit: 50, windowMs: ${WINDOW_MS}, slices: 10 } }
domains:
  - domain: edge
    descriptors:
      - key: ip
        rate_limit: { unit: hour, requests_per_unit: 3 }
`;
const RESOURCES = ['api:bucket', 'api:gcra', 'api:fixed', 'api:log', 'api:window'];

/** Sends checks of `key` one after another until one is denied; resolves to how many passed (at most `max`). */
async function drain(url: string, resource: string, key: string, max = 200): Promise<number> {
  for (let n = 0; n < max; n++) {
    const a = await call(url, '/v1/check', { resource, key }, { token: API_TOKEN });
    expect(a.status).toBe(200);
    if (a.json.allowed !== true) return n;
  }
  return max;
}

const stores: [string, () => string[]][] = [
  ['embedded store', () => []],
  ['Redis', () => storeFlags('redis')],
];

describe.each(stores)('the data plane on the %s', (name, storeArgs) => {
  const tmp = scratch();
  let server: ServerProcess;
  /**
   * On Redis, waits when less than 10 s is left of api:fixed's window: Redis' windows run from
   * multiples of ten minutes of this machine's clock, and one ending between a test's calls would
   * refill the key. The embedded store's first window runs from the service's start: ten minutes
   * that this file is well within.
   */
  const clearOfFixedWindowEnd = async () => {
    if (name === 'Redis') await clearOfWindowEnd(WINDOW_MS, 10_000);
  };

  beforeAll(async () => {
    const rules = writeRules(tmp.dir, RULES);
    server = await spawnServer(['--rules', rules, '--api-token', API_TOKEN, ...storeArgs()]);
  });
  afterAll(async () => {
    await server?.stop();
    tmp.remove();
  });

  it('refuses refunds without the token, so draining and refunding a key gains nothing', async () => {
    let admitted = 0;
    for (let round = 0; round < 5; round++) {
      admitted += await drain(server.url, 'api:bucket', 'victim');
      for (const authorization of [undefined, 'Bearer wrong-token-0123456789', `Basic ${API_TOKEN}`, API_TOKEN]) {
        const refund = await fetch(new URL('/v1/adjust', server.url), {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(authorization === undefined ? {} : { authorization }) },
          body: JSON.stringify({ resource: 'api:bucket', key: 'victim', delta: -50 }),
        });
        expect(refund.status).toBe(401);
        expect(refund.headers.get('www-authenticate')).toBe('Bearer');
        expect(((await refund.json()) as { error: { code: string } }).error.code).toBe('SLUICE_ERR_UNAUTHORIZED');
      }
    }
    // One bucket's worth in all (an open service gave 50 more each round).
    expect(admitted).toBe(50);
  });

  it('takes the bearer scheme in any case, and guards every data-plane endpoint', async () => {
    for (const scheme of ['Bearer', 'bearer', 'BEARER']) {
      const res = await fetch(new URL('/v1/check', server.url), {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `${scheme} ${API_TOKEN}` },
        body: JSON.stringify({ resource: 'api:gcra', key: `scheme-${scheme}` }),
      });
      expect(res.status).toBe(200);
    }
    const item = { resource: 'api:gcra', key: 'guarded' };
    const bodies: Record<string, unknown> = {
      '/v1/check': item,
      '/v1/acquire': { ...item, maxWaitMs: 0 },
      '/v1/release': { ...item, permitId: 'x' },
      '/v1/adjust': { ...item, delta: 1 },
      '/v1/renew': { ...item, permitId: 'x' },
      '/v1/reserve': { ...item, min: 1, max: 2 },
    };
    for (const [path, body] of Object.entries(bodies)) {
      const a = await call(server.url, path, body);
      expect(a.status, path).toBe(401);
      expect(a.json.error.code, path).toBe('SLUICE_ERR_UNAUTHORIZED');
    }
    // Nothing was charged by the refused calls.
    expect(await drain(server.url, 'api:gcra', 'guarded')).toBe(50);
    // Probes, figures and the resource list (names and limits) stay open.
    expect((await call(server.url, '/v1/resources')).status).toBe(200);
    expect((await call(server.url, '/healthz')).status).toBe(200);
    expect((await call(server.url, '/metrics')).status).toBe(200);
  });

  it('answers an unauthenticated upload 401 and closes it instead of reading the body', async () => {
    // Each announces 4 GiB and sends up to 256 MiB as fast as the server takes it.
    const OFFERED = 256 * 2 ** 20;
    for (const [path, authorization] of [
      ['/v1/check', 'Bearer wrong-token-0123456789'],
      ['/v1/admin/rules', undefined],
    ] as const) {
      const { port } = new URL(server.url);
      const socket = connect({ port: Number(port), host: '127.0.0.1' });
      let answer = '';
      socket.setEncoding('utf8').on('data', (c: string) => (answer += c));
      const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      socket.on('error', () => undefined);
      const auth = authorization === undefined ? '' : `Authorization: ${authorization}\r\n`;
      socket.write(
        `POST ${path} HTTP/1.1\r\nHost: sluice\r\n${auth}Content-Type: application/json\r\nContent-Length: ${4 * 2 ** 30}\r\n\r\n`,
      );
      const chunk = Buffer.alloc(2 ** 20, 0x20);
      let sent = 0;
      while (sent < OFFERED && !socket.destroyed) {
        const more = socket.write(chunk);
        sent += chunk.length;
        if (!more) await Promise.race([new Promise((r) => socket.once('drain', r)), closed]);
      }
      await closed;
      expect(answer, path).toMatch(/^HTTP\/1\.1 401 /);
      expect(answer.toLowerCase(), path).toContain('connection: close');
      // What the kernel's buffers hold, not the 256 MiB the server would have read to its end.
      expect(sent, path).toBeLessThan(OFFERED / 4);
    }
  });

  it('refuses gRPC calls without the token in their metadata', async () => {
    const request = { domain: 'edge', descriptors: [{ entries: [{ key: 'ip', value: '10.0.0.1' }] }] };
    for (const authorization of [undefined, 'Bearer nope-0123456789abcdef', `bearer ${API_TOKEN}x`]) {
      const rls = new RlsClient(`127.0.0.1:${server.grpcPort}`, authorization);
      try {
        const r = await rls.shouldRateLimit(request);
        expect(r.error).toMatchObject({ code: 16, sluice: 'SLUICE_ERR_UNAUTHORIZED' });
      } finally {
        rls.close();
      }
    }
    const rls = new RlsClient(`127.0.0.1:${server.grpcPort}`, `bearer ${API_TOKEN}`);
    try {
      const codes = [];
      for (let i = 0; i < 4; i++) codes.push((await rls.shouldRateLimit(request)).overall_code);
      // The refused calls took nothing: the hour's three pass.
      expect(codes).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    } finally {
      rls.close();
    }
  });

  it('bounds charges: a huge one blocks a key for at most one window', async () => {
    await clearOfFixedWindowEnd();
    for (const resource of RESOURCES) {
      const key = 'locked';
      const charge = await call(server.url, '/v1/adjust', { resource, key, delta: 1e9 }, { token: API_TOKEN });
      expect(charge.status, resource).toBe(200);
      const after = await call(server.url, '/v1/check', { resource, key }, { token: API_TOKEN });
      expect(after.json.allowed, resource).toBe(false);
      // One window, plus one emission interval for the smooth limits (an open service said ~694 days).
      expect(after.json.retryAfterMs, resource).toBeLessThanOrEqual(WINDOW_MS + WINDOW_MS / 50);
      // A fixed window ends on the clock's multiples of windowMs, which may be any moment now.
      if (resource !== 'api:fixed') expect(after.json.retryAfterMs, resource).toBeGreaterThan(WINDOW_MS / 2);
    }
  });

  it('bounds refunds: a huge one never lifts a key above its capacity', async () => {
    await clearOfFixedWindowEnd();
    for (const resource of RESOURCES) {
      const key = 'refunded';
      expect(await drain(server.url, resource, key, 10)).toBe(10);
      const refund = await call(server.url, '/v1/adjust', { resource, key, delta: -1e9 }, { token: API_TOKEN });
      expect(refund.status, resource).toBe(200);
      expect(await drain(server.url, resource, key), resource).toBe(50);
    }
  });

  it('takes keys up to --max-key-length on every store, and refuses longer ones', async () => {
    const longest = await call(server.url, '/v1/check', { resource: 'api:fixed', key: 'k'.repeat(512) }, { token: API_TOKEN });
    expect(longest.status).toBe(200);
    expect(longest.json.allowed).toBe(true);
    const over = await call(server.url, '/v1/check', { resource: 'api:fixed', key: 'k'.repeat(513) }, { token: API_TOKEN });
    expect(over.status).toBe(400);
    expect(over.json.error.code).toBe('SLUICE_ERR_INVALID_REQUEST');
  });

  it('serves the remote client that carries the token, and tells one without it', async () => {
    const good = new RemoteLimiter({ url: server.url, token: API_TOKEN, logger: false });
    const bad = new RemoteLimiter({ url: server.url, logger: false });
    try {
      expect((await good.try('api:fixed', { key: 'remote' })).allowed).toBe(true);
      await expect(bad.try('api:fixed', { key: 'remote' })).rejects.toMatchObject({ code: 'SLUICE_ERR_UNAUTHORIZED' });
    } finally {
      await good.close();
      await bad.close();
    }
  });
});

describe.each(stores)('the client count on an open data plane (%s)', (_name, storeArgs) => {
  it('counts clients from decision calls only, not from forged ids on public or refused calls', async () => {
    const tmp = scratch();
    const server = await spawnServer(['--rules', writeRules(tmp.dir, RULES), ...storeArgs()]);
    const clients = async () => (await call(server.url, '/v1/resources')).json.clients as number;
    const withId = (id: string) => ({ 'content-type': 'application/json', 'sluice-client-id': id });
    try {
      for (let i = 0; i < 50; i++) {
        await fetch(new URL('/v1/resources', server.url), { headers: withId(`forged-${i}`) });
        await fetch(new URL('/v1/check', server.url), { method: 'POST', headers: withId(`bad-${i}`), body: '{"resource":' });
        await fetch(new URL('/v1/outcomes', server.url), { method: 'POST', headers: withId(`outcome-${i}`), body: '{}' });
      }
      expect(await clients()).toBe(0);
      for (const id of ['worker-a', 'worker-b']) {
        const r = await fetch(new URL('/v1/check', server.url), {
          method: 'POST',
          headers: withId(id),
          body: JSON.stringify({ resource: 'api:gcra', key: 'k' }),
        });
        expect(r.status).toBe(200);
      }
      expect(await clients()).toBe(2);
      // A remote client's rule poll names its heartbeat: that poll is what keeps it counted.
      await fetch(new URL('/v1/resources', server.url), {
        headers: { ...withId('poller'), 'sluice-client-heartbeat-ms': '1000' },
      });
      expect(await clients()).toBe(3);
    } finally {
      await server.stop();
      tmp.remove();
    }
  });
});

describe('where sluice serve listens', () => {
  it('warns when it serves decisions beyond this machine without a token', async () => {
    const tmp = scratch();
    const server = await spawnServer(['--rules', writeRules(tmp.dir, RULES), '--host', '0.0.0.0']);
    try {
      await eventually(async () => /without --api-token/.test(server.logs.join('\n')));
    } finally {
      await server.stop();
      tmp.remove();
    }
  });
});
