/**
 * A bounded soak: hostile clients and normal clients on one `sluice serve` at once, for
 * {@link SOAK_MS} on each store. The hostile ones try every attack the abuse suite covers one by
 * one (floods of new keys, refunds and charges without the token, keys crafted to collide,
 * stalled bodies, garbage from peers that close and peers that never do, unauthenticated
 * uploads, forged outcome reports, Envoy limit overrides, thousands of waiting acquires); the
 * normal ones must get exactly the decisions their limits promise, and an answer to every call,
 * and afterwards the process holds no more descriptors than before. Latency is
 * recorded by the benchmark (`npm run bench -- --only abuse`), not asserted here.
 */
import { readdirSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RlsClient, call, scratch, spawnServer, writeRules, type ServerProcess } from '../../packages/server/test/support.js';
import { randomPrefix } from '../env.js';
import { storeFlags } from '../sluice-serve.js';

const SOAK_MS = 20_000;
const API_TOKEN = 'soak-data-plane-token-0123456789';
const NORMAL_KEYS = 8;
const MAX_KEYS = 5_000;

// Long windows: nothing refills during the soak, so every normal key's total is exact.
const RULES = `
resources:
  soak:bucket: { limits: { algorithm: token-bucket, limit: 20, windowMs: 3600000 } }
  soak:window: { limits: { algorithm: sliding-window, limit: 20, windowMs: 3600000, slices: 10 } }
  soak:tenants:
    limits: { algorithm: token-bucket, limit: 1000, windowMs: 3600000 }
    tenants: { acme: { limits: { algorithm: token-bucket, limit: 10, windowMs: 3600000 } } }
  soak:flood: { limits: { algorithm: token-bucket, limit: 5, windowMs: 3600000 } }
  soak:pool: { limits: { algorithm: concurrency, limit: 1, permitTtlMs: 600000 } }
  soak:guarded:
    limits: { algorithm: gcra, limit: 100000, windowMs: 1000 }
    breaker: { scope: fleet, minimumCalls: 20, failureRateThreshold: 0.5, openDurationMs: 600000, syncMs: 50 }
domains:
  - domain: edge
    descriptors:
      - key: ip
        rate_limit: { unit: hour, requests_per_unit: 5 }
`;

type Json = Record<string, unknown>;

/** A call with the data-plane token (or `token`; null: none), answered within a generous bound. */
function api(url: string, path: string, body: unknown, token: string | null = API_TOKEN) {
  return call(url, path, body, { ...(token === null ? {} : { token }), signal: AbortSignal.timeout(30_000) });
}

/** Runs `step` again and again, `parallel` at once, until `until` resolves; errors are the attack's own. */
async function loop(parallel: number, until: Promise<void>, step: (i: number) => Promise<unknown>): Promise<number> {
  let stop = false;
  void until.then(() => (stop = true));
  let n = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (!stop) {
        // An attack step the server leaves hanging (a refused connection, a cut stream) must not hold the soak.
        await Promise.race([step(n++).catch(() => undefined), sleep(10_000)]);
      }
    }),
  );
  return n;
}

/** Opens a connection that sends a request head promising a body it never sends. */
function stalledBody(port: number): Socket {
  const socket = connect(port, '127.0.0.1', () => {
    socket.write(
      'POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"resource":',
    );
  });
  socket.on('error', () => undefined);
  return socket;
}

const stores: [string, () => string[]][] = [
  ['embedded store', () => ['--max-keys', String(MAX_KEYS)]],
  // A generous bound on each Redis call: past it a call is decided by the store-failure policy
  // (this process' fair share), which is exact for an outage, not for a busy machine's slow call.
  ['Redis', () => storeFlags('redis', randomPrefix('soak'), 20_000)],
];

describe.each(stores)('hostile and normal clients together on the %s', (_name, storeArgs) => {
  const tmp = scratch();
  let server: ServerProcess;

  beforeAll(async () => {
    server = await spawnServer(['--rules', writeRules(tmp.dir, RULES), '--api-token', API_TOKEN, ...storeArgs()]);
  });
  afterAll(async () => {
    await server?.stop();
    tmp.remove();
  });

  it('keeps every normal client’s decisions exact', { timeout: SOAK_MS + 120_000 }, async () => {
    const url = server.url;
    const port = Number(new URL(url).port);
    const grpcTarget = `127.0.0.1:${server.grpcPort}`;
    // The normal keys exist before the attack starts.
    const normalKeys = Array.from({ length: NORMAL_KEYS }, (_, i) => `normal-${i}`);
    for (const key of normalKeys) {
      expect((await api(url, '/v1/check', { resource: 'soak:bucket', key })).json).toMatchObject({ allowed: true });
      expect((await api(url, '/v1/check', { resource: 'soak:window', key })).json).toMatchObject({ allowed: true });
    }
    const held = await api(url, '/v1/acquire', { resource: 'soak:pool', key: 'normal', maxWaitMs: 0 });
    expect(held.json).toMatchObject({ allowed: true });

    const openFds = () => readdirSync(`/proc/${server.child.pid}/fd`).length;
    const fdsBefore = openFds();
    const over = sleep(SOAK_MS);
    const sockets: Socket[] = [];
    const hostile = Promise.all([
      // New keys, as fast as two connections go (the table holds MAX_KEYS).
      loop(8, over, (i) =>
        api(url, '/v1/check', {
          items: Array.from({ length: 50 }, (_, j) => ({ resource: 'soak:flood', key: `flood-${i}-${j}` })),
        }),
      ),
      // Refunds and charges of the normal keys without the token, or with a wrong one.
      loop(2, over, (i) =>
        api(
          url,
          '/v1/adjust',
          { resource: 'soak:bucket', key: normalKeys[i % NORMAL_KEYS], delta: i % 2 === 0 ? -1e9 : 1e9 },
          i % 3 === 0 ? null : 'wrong-token-0123456789abcdef',
        ),
      ),
      // Keys crafted to land on the tenant's quota or on another priority's entry.
      loop(2, over, (i) =>
        api(url, '/v1/check', { resource: 'soak:tenants', key: i % 2 === 0 ? '@acme' : `v\u0000normal`, priority: 'core' }),
      ),
      // Envoy limit overrides, a new one each time.
      (async () => {
        const rls = new RlsClient(grpcTarget, `Bearer ${API_TOKEN}`);
        try {
          return await loop(2, over, (i) =>
            rls.shouldRateLimit({
              domain: 'edge',
              descriptors: [
                {
                  entries: [{ key: 'ip', value: `10.1.${i % 250}.${i % 199}` }],
                  limit: { requests_per_unit: 1 + i, unit: 'HOUR' },
                },
              ],
            }),
          );
        } finally {
          rls.close();
        }
      })(),
      // Waiting acquires on the held pool, many from one client.
      loop(50, over, () =>
        call(url, '/v1/acquire', { resource: 'soak:pool', key: 'normal', maxWaitMs: 2000 }, { token: API_TOKEN }),
      ),
      // Stalled bodies and garbage, from peers that close and from peers that never do.
      loop(1, over, async () => {
        if (sockets.length < 200) sockets.push(stalledBody(port));
        const junk = connect(port, '127.0.0.1', () => junk.end('GARBAGE / HTTP/9.9\r\n\r\n'));
        junk.on('error', () => undefined);
        const stays = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => stays.write('GARBAGE\r\n\r\n'));
        stays.on('error', () => undefined);
        sockets.push(stays);
        await sleep(20);
      }),
      // Uploads without the token: answered 401 and closed, never read to their end.
      loop(
        1,
        over,
        () =>
          new Promise<void>((resolve) => {
            const upload = connect(port, '127.0.0.1', () => {
              upload.write(
                `POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${2 ** 30}\r\n\r\n`,
              );
              const chunk = Buffer.alloc(2 ** 16, 0x20);
              const pump = () => {
                while (!upload.destroyed && upload.write(chunk));
              };
              upload.on('drain', pump);
              pump();
            });
            upload.on('error', () => undefined);
            upload.on('close', () => resolve());
          }),
      ),
      // Forged outcome reports: failures enough to open the breaker, without a credential.
      loop(2, over, (i) =>
        api(
          url,
          '/v1/outcomes',
          { items: Array.from({ length: 10 }, () => ({ resource: 'soak:guarded', ok: false, durationMs: 5, count: 100 })) },
          i % 2 === 0 ? null : 'wrong-token-0123456789abcdef',
        ),
      ),
    ]);

    // Normal clients, paced: each key is asked once every ~200 ms for the whole soak.
    const rls = new RlsClient(grpcTarget, `Bearer ${API_TOKEN}`);
    const normal = {
      bucket: new Map<string, number>(),
      window: new Map<string, number>(),
      tenant: 0,
      guarded: 0,
      edge: 0,
      answered: 0,
      failed: [] as string[],
    };
    const ask = async (path: string, body: Json): Promise<Json | undefined> => {
      const a = await api(url, path, body);
      if (a.status !== 200) {
        normal.failed.push(`${path} ${a.status} ${JSON.stringify(a.json)}`);
        return undefined;
      }
      normal.answered++;
      // Decided without the store (its failure policy): exactness is not promised, so say so.
      if ((a.json as Json).source === 'fallback') normal.failed.push(`${path} ${JSON.stringify(body)} decided by the fallback`);
      return a.json as Json;
    };
    const started = Date.now();
    // At least 25 rounds however slow the machine: every normal key can spend its 19.
    for (let round = 0; Date.now() - started < SOAK_MS || round < 25; round++) {
      await Promise.all([
        ...normalKeys.map(async (key) => {
          if ((await ask('/v1/check', { resource: 'soak:bucket', key }))?.allowed === true)
            normal.bucket.set(key, (normal.bucket.get(key) ?? 0) + 1);
          if ((await ask('/v1/check', { resource: 'soak:window', key }))?.allowed === true)
            normal.window.set(key, (normal.window.get(key) ?? 0) + 1);
        }),
        (async () => {
          if ((await ask('/v1/check', { resource: 'soak:tenants', key: 'user-1', tenant: 'acme' }))?.allowed === true)
            normal.tenant++;
        })(),
        (async () => {
          const d = await ask('/v1/check', { resource: 'soak:guarded', key: 'normal' });
          if (d?.allowed === true) normal.guarded++;
          else if (d !== undefined) normal.failed.push(`soak:guarded denied: ${JSON.stringify(d)}`);
        })(),
        (async () => {
          const r = await rls.shouldRateLimit({
            domain: 'edge',
            descriptors: [{ entries: [{ key: 'ip', value: '192.0.2.1' }] }],
          });
          if (r.error !== undefined) normal.failed.push(`grpc ${JSON.stringify(r.error)}`);
          else if (r.overall_code === 'OK') normal.edge++;
        })(),
      ]);
      await sleep(200);
    }
    rls.close();
    await hostile;
    for (const s of sockets) s.destroy();

    expect(normal.failed).toEqual([]);
    expect(normal.answered).toBeGreaterThan(NORMAL_KEYS * 4);
    // Each key's first check came before the soak: 19 more in the hour, no more, no fewer.
    for (const key of normalKeys) {
      expect(normal.bucket.get(key) ?? 0, key).toBe(19);
      expect(normal.window.get(key) ?? 0, key).toBe(19);
    }
    expect(normal.tenant).toBe(10);
    expect(normal.edge).toBe(5);
    // No forged report opened the breaker: every round's check of the guarded resource passed.
    expect(normal.guarded).toBeGreaterThanOrEqual(25);
    // Every attack's connection was given back (the stalled bodies closed just now: give them a moment).
    const deadline = Date.now() + 30_000;
    while (openFds() > fdsBefore + 20 && Date.now() < deadline) await sleep(200);
    expect(openFds()).toBeLessThanOrEqual(fdsBefore + 20);
    // The held permit is still held: the waiting crowd got nothing.
    const again = await api(url, '/v1/acquire', { resource: 'soak:pool', key: 'normal', maxWaitMs: 0 });
    expect(again.json).toMatchObject({ allowed: false });
    const released = await api(url, '/v1/release', {
      resource: 'soak:pool',
      key: 'normal',
      permitId: (held.json as Json).permitId,
    });
    expect(released.json).toEqual({ released: true });
  });
});
