/* eslint-disable @typescript-eslint/no-explicit-any --
   the assertions read parsed JSON and protobuf answers dynamically */
import { connect } from 'node:net';
import { Agent, request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rng } from './rng.js';
import { RlsClient, TOKEN, call, scratch, startTestServer, writeRules, type TestServer } from './support.js';

const RULES = `
resources:
  api:fixed: { limits: { algorithm: fixed-window, limit: 5, windowMs: 600000 } }
  db:pool: { limits: { algorithm: concurrency, limit: 2, permitTtlMs: 1000 } }
  api:tenants:
    limits: { algorithm: token-bucket, limit: 1000 }
    tenants: { acme: { limits: { algorithm: token-bucket, limit: 10 } } }
    priority: { coreShare: 0.2 }
domains:
  - domain: edge
    descriptors:
      - key: ip
        rate_limit: { unit: hour, requests_per_unit: 3 }
      - key: path
        value: /a*
        descriptors:
          - key: user
            rate_limit: { unit: minute, requests_per_unit: 2 }
`;

const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20_261_129);

class Gen {
  readonly #r: () => number;
  constructor(seed: number) {
    this.#r = rng(seed);
  }
  int(n: number): number {
    return Math.floor(this.#r() * n);
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }
  chance(p: number): boolean {
    return this.#r() < p;
  }
  string(): string {
    const kinds = [
      () => '',
      () => 'a'.repeat(this.int(2000)),
      () => String.fromCharCode(...Array.from({ length: this.int(20) }, () => this.int(0xffff))),
      () =>
        this.pick(['api:fixed', 'db:pool', 'api:tenants', 'envoy:edge.ip', 'nope', 'a|b', '__proto__', 'constructor', '../etc']),
      () => `${this.int(1e9)}`,
      () => '\u0000\ud800x',
    ];
    return this.pick(kinds)();
  }
  number(): number {
    return this.pick([
      0,
      -1,
      1,
      2,
      1.5,
      -0,
      1e308,
      -1e308,
      2 ** 53 + 1,
      1e9,
      1e9 + 1,
      Number.MAX_SAFE_INTEGER,
      0.1,
      this.int(100),
    ]);
  }
  json(depth = 0): unknown {
    const leaf = [() => null, () => this.chance(0.5), () => this.number(), () => this.string()];
    if (depth > 3) return this.pick(leaf)();
    const kinds = [...leaf, () => Array.from({ length: this.int(4) }, () => this.json(depth + 1)), () => this.object(depth + 1)];
    return this.pick(kinds)();
  }
  object(depth = 0): Record<string, unknown> {
    const keys = [
      'resource',
      'key',
      'cost',
      'tenant',
      'priority',
      'maxWaitMs',
      'permitId',
      'leaseId',
      'delta',
      'min',
      'max',
      'ttlMs',
      'id',
      'book',
      'items',
      'text',
      'author',
      'reason',
      'version',
      'expectedVersion',
      'file',
      '__proto__',
      'constructor',
      'x',
    ];
    const o: Record<string, unknown> = {};
    for (let i = this.int(5); i > 0; i--) o[this.pick(keys)] = this.json(depth);
    return o;
  }
  /** An item that is often valid, so fuzzing also reaches the limiter. */
  item(): Record<string, unknown> {
    const o: Record<string, unknown> = {
      resource: this.pick(['api:fixed', 'db:pool', 'api:tenants', 'api:tenants', 'nope', 'envoy:edge.ip']),
    };
    if (this.chance(0.5)) return { ...o, key: `k${this.int(50)}`, ...(this.chance(0.5) ? { cost: this.int(3) } : {}) };
    if (this.chance(0.6)) o.key = this.chance(0.8) ? `k${this.int(50)}` : this.string();
    if (this.chance(0.4)) o.cost = this.chance(0.7) ? this.int(3) : this.number();
    if (this.chance(0.2)) o.tenant = this.pick(['acme', 'other', '', 'x|y']);
    if (this.chance(0.2)) o.priority = this.pick(['core', 'normal', 'high', 1]);
    if (this.chance(0.2)) o.maxWaitMs = this.chance(0.8) ? this.int(40) : this.number();
    if (this.chance(0.1)) o.permitId = this.string();
    if (this.chance(0.05)) o.leaseId = this.chance(0.5) && typeof o.permitId === 'string' ? o.permitId : this.string();
    if (this.chance(0.1)) o.delta = this.number();
    if (this.chance(0.06)) o.min = this.chance(0.8) ? this.int(4) : this.number();
    if (this.chance(0.06)) o.max = this.chance(0.8) ? this.int(8) : this.number();
    if (this.chance(0.04)) o.ttlMs = this.chance(0.8) ? this.int(5000) : this.number();
    if (this.chance(0.15)) o.id = this.chance(0.8) ? `b${this.int(20)}` : this.string();
    if (this.chance(0.05)) o.book = this.chance(0.8) ? `b${this.int(20)}` : this.string();
    if (this.chance(0.1)) o[this.pick(['extra', 'Resource', 'cost '])] = 1;
    return o;
  }
  body(): Buffer | undefined {
    const kinds: (() => Buffer | undefined)[] = [
      () => undefined,
      () => Buffer.from(JSON.stringify(this.item())),
      () => Buffer.from(JSON.stringify(this.item())),
      () => Buffer.from(JSON.stringify(this.item())),
      () => Buffer.from(JSON.stringify(this.item())),
      () =>
        Buffer.from(
          JSON.stringify({ items: Array.from({ length: this.int(14) }, () => (this.chance(0.8) ? this.item() : this.json())) }),
        ),
      () => Buffer.from(JSON.stringify(this.json())),
      () => Buffer.from(JSON.stringify(this.object())),
      () => Buffer.from(JSON.stringify(this.item())).subarray(0, this.int(30)),
      () => Buffer.from('['.repeat(3000 + this.int(2000)) + ']'.repeat(this.int(5000))),
      () => Buffer.from(`{"items":${'['.repeat(2000)}${']'.repeat(2000)}}`),
      () => Buffer.from(Array.from({ length: this.int(300) }, () => this.int(256))),
      () => Buffer.alloc(20_000 + this.int(100_000), 'a'),
      () => Buffer.from(`{"resource":"api:fixed","key":"${'k'.repeat(600)}"}`),
      () => Buffer.from('{"resource":"api:fixed","cost":1e999}'),
      () => Buffer.from('{"resource":"api:fixed","__proto__":{"polluted":true}}'),
      () => Buffer.from([0xff, 0xfe, 0x7b, 0x7d]),
    ];
    return this.pick(kinds)();
  }
}

const PATHS = [
  '/v1/check',
  '/v1/acquire',
  '/v1/release',
  '/v1/adjust',
  '/v1/reserve',
  '/v1/renew',
  '/v1/book',
  '/v1/claim',
  '/v1/cancel',
  '/v1/resources',
  '/v1/admin/rules',
  '/v1/admin/rules/history',
  '/v1/admin/rules/diff',
  '/v1/admin/rules/rollback',
  '/v1/stats',
  '/metrics',
  '/healthz',
  '/readyz',
];

interface Answer {
  readonly status: number;
  readonly body: string;
}

function send(
  agent: Agent,
  base: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body: Buffer | undefined,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(new URL(path, base), { method, agent, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    // The server may answer (413) and close before a large body is sent.
    req.on('error', (err: NodeJS.ErrnoException) =>
      err.code === 'ECONNRESET' || err.code === 'EPIPE' ? resolve({ status: 0, body: '' }) : reject(err),
    );
    req.end(body);
  });
}

describe('fuzzing every endpoint', () => {
  const tmp = scratch();
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({
      rules: [writeRules(tmp.dir, RULES)],
      maxWaitMs: '40',
      maxBatch: '10',
      maxBodyBytes: '8192',
      maxOverrides: '5',
    });
  });
  afterAll(async () => {
    await server?.close();
    tmp.remove();
  });

  it('answers thousands of random and malformed HTTP requests without a 5xx', async () => {
    const g = new Gen(SEED);
    const agent = new Agent({ keepAlive: true, maxSockets: 16 });
    const statuses = new Map<number, number>();
    const failures: string[] = [];
    const total = 3000;
    let next = 0;
    const worker = async () => {
      while (next < total) {
        next++;
        const method = g.chance(0.8) ? 'POST' : g.pick(['GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD']);
        let path = g.chance(0.5)
          ? g.pick(PATHS.slice(0, 4))
          : g.chance(0.8)
            ? g.pick(PATHS)
            : g.pick(['/', '/v2/check', '/v1/check/x', '/%zz', `/${g.string()}`.replace(/[^\x21-\x7e]/g, '')]);
        if (g.chance(0.15))
          path += g.pick([
            '?http429=1',
            '?http429=x',
            '?statuses=1',
            '?statuses=yes',
            '?from=1&to=2',
            '?from=-1',
            '?limit=0',
            '?version=1',
            '?a=1&a=2',
            '?from=99999999999999999999',
          ]);
        const headers: Record<string, string> = {};
        const ct = g.chance(0.8)
          ? g.pick(['application/json', 'application/json; charset=utf-8'])
          : g.pick(['text/plain', 'multipart/form-data; boundary=x', 'application/jsonx', '']);
        if (ct !== '') headers['content-type'] = ct;
        const admin = path.startsWith('/v1/admin');
        // Admin calls with the token only ever carry invalid changes: a fuzzer must not be able to
        // replace the rules the final checks rely on.
        const withToken = admin && (method === 'GET' || g.chance(0.5));
        if (admin)
          headers.authorization = withToken
            ? `Bearer ${TOKEN}`
            : g.pick(['', 'Bearer', 'Bearer wrong', `bearer ${TOKEN}`, `Bearer ${TOKEN} `, 'Basic eA==']);
        let body = method === 'GET' || method === 'HEAD' ? undefined : g.body();
        if (withToken && method === 'POST') {
          body = Buffer.from(
            JSON.stringify(
              g.chance(0.5)
                ? { text: g.number(), author: 'f', reason: 'f' }
                : { ...g.object(), text: 'resources: [', author: 'f', reason: 'f' },
            ),
          );
          if (path.endsWith('/rollback'))
            body = Buffer.from(JSON.stringify({ version: g.pick([0, -1, 'x', 1e10, 1.5]), author: 'f', reason: 'f' }));
        }
        const a = await send(agent, server.url, method, path, headers, body);
        statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
        if (a.status >= 500 && !(path === '/readyz' && a.status === 503))
          failures.push(`${method} ${path} -> ${a.status} ${a.body.slice(0, 300)}`);
        if (a.status >= 400 && method !== 'HEAD' && a.status !== 0) {
          let code: unknown;
          try {
            code = (JSON.parse(a.body) as { error?: { code?: unknown } }).error?.code;
          } catch {
            code = undefined;
          }
          if (typeof code !== 'string' || !code.startsWith('SLUICE_ERR_'))
            failures.push(`${method} ${path} -> ${a.status} without a code: ${a.body.slice(0, 200)}`);
        }
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    agent.destroy();
    expect(failures).toEqual([]);
    // The fuzzer reached decisions as well as every kind of refusal.
    expect(statuses.get(200)).toBeGreaterThan(150);
    const decided = [...(await server.metrics.registry.metrics()).matchAll(/^sluice_decisions_total\{[^}]*\} (\d+)$/gm)];
    expect(decided.reduce((n, m) => n + Number(m[1]), 0)).toBeGreaterThan(100);
    for (const s of [400, 401, 404, 413, 415]) expect(statuses.get(s), `status ${s}`).toBeGreaterThan(0);
  });

  it('answers random and malformed gRPC messages and raw bytes without an internal error', async () => {
    const g = new Gen(SEED + 1);
    const client = new RlsClient(`127.0.0.1:${server.grpcPort}`);
    const codes = new Map<string, number>();
    try {
      for (let i = 0; i < 1500; i++) {
        let r: any;
        if (g.chance(0.5)) {
          r = await client.raw(Buffer.from(Array.from({ length: g.int(200) }, () => g.int(256))));
        } else {
          const descriptor = () => ({
            entries: Array.from({ length: g.int(4) }, () => ({
              key: g.pick(['ip', 'path', 'user', '', g.string()]),
              value: g.pick(['1', '/abc', 'bob', '', g.string()]),
            })),
            ...(g.chance(0.2)
              ? {
                  limit: {
                    requests_per_unit: g.pick([0, 1, 5, 4294967295]),
                    unit: g.pick(['SECOND', 'MINUTE', 'UNKNOWN', 'YEAR']),
                  },
                }
              : {}),
            ...(g.chance(0.2) ? { hits_addend: { value: g.pick([0, 1, '18446744073709551615', 7]) } } : {}),
          });
          const request = {
            domain: g.pick(['edge', 'edge', '', 'other', g.string()]),
            descriptors: Array.from({ length: g.int(g.chance(0.05) ? 100 : 4) }, descriptor),
            hits_addend: g.pick([0, 1, 3, 4294967295]),
          };
          try {
            r = await client.shouldRateLimit(request);
          } catch {
            continue; // the client could not even encode it
          }
        }
        const key = r.error ? `error ${r.error.code}` : `ok ${r.overall_code}`;
        codes.set(key, (codes.get(key) ?? 0) + 1);
        expect([2, 12, 13, 14], JSON.stringify(r)).not.toContain(r.error?.code);
      }
    } finally {
      client.close();
    }
    expect(codes.get('error 3')).toBeGreaterThan(0);
    expect((codes.get('ok OK') ?? 0) + (codes.get('ok OVER_LIMIT') ?? 0)).toBeGreaterThan(0);
  });

  it('survives garbage on both ports at the TCP level', async () => {
    const g = new Gen(SEED + 2);
    const ports = [new URL(server.url).port, String(server.grpcPort)].map(Number);
    const httpStatuses: number[] = [];
    let timedOut = 0;
    for (let i = 0; i < 60; i++) {
      const port = ports[i % 2]!;
      const answer = await new Promise<string>((resolve) => {
        const chunks: Buffer[] = [];
        const done = () => resolve(Buffer.concat(chunks).toString('latin1'));
        const socket = connect(port, '127.0.0.1', () => {
          const prefix = g.chance(0.5)
            ? 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
            : g.pick(['POST /v1/check HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n', 'GET / HTTP/9.9\r\n\r\n', '']);
          socket.end(Buffer.concat([Buffer.from(prefix), Buffer.from(Array.from({ length: g.int(500) }, () => g.int(256)))]));
        });
        socket.on('data', (d: Buffer) => chunks.push(d));
        socket.on('error', done);
        socket.on('close', done);
        // Generous: the server closes each of these connections itself, even on a loaded machine.
        socket.setTimeout(15_000, () => {
          timedOut++;
          socket.destroy();
        });
      });
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(answer);
      if (port === ports[0] && status) httpStatuses.push(Number(status[1]));
    }
    // Every connection was closed by the server, and the HTTP port answered garbage with a 4xx.
    expect(timedOut).toBe(0);
    expect(httpStatuses.length).toBeGreaterThan(0);
    expect(httpStatuses.filter((c) => c < 400 || c >= 500)).toEqual([]);
    // Both ports still serve.
    expect((await call(server.url, '/healthz')).status).toBe(200);
    const client = new RlsClient(`127.0.0.1:${server.grpcPort}`);
    try {
      const r = await client.shouldRateLimit({
        domain: 'edge',
        descriptors: [{ entries: [{ key: 'ip', value: 'garbage-check' }] }],
      });
      expect(r.overall_code).toBe('OK');
    } finally {
      client.close();
    }
  });

  it('still decides correctly afterwards', async () => {
    expect((await call(server.url, '/healthz')).json).toEqual({ status: 'ok' });
    expect((await call(server.url, '/readyz')).status).toBe(200);
    const answers = [];
    for (let i = 0; i < 8; i++)
      answers.push((await call(server.url, '/v1/check', { resource: 'api:fixed', key: 'after-fuzz' })).json.allowed);
    expect(answers).toEqual([true, true, true, true, true, false, false, false]);
    const client = new RlsClient(`127.0.0.1:${server.grpcPort}`);
    try {
      const codes = [];
      for (let i = 0; i < 4; i++) {
        codes.push(
          (await client.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'ip', value: 'after-fuzz' }] }] }))
            .overall_code,
        );
      }
      expect(codes).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    } finally {
      client.close();
    }
    expect(server.rules.version?.version).toBe(1);
    const metrics = (await call(server.url, '/metrics')).json as string;
    expect(metrics).not.toMatch(/^sluice_http_requests_total\{[^}]*status="5\d\d"\}/m);
    expect(metrics).not.toMatch(/^sluice_grpc_requests_total\{[^}]*code="13"\}/m);
  });
});
