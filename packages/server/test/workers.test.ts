/* eslint-disable @typescript-eslint/no-explicit-any, @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-return, @typescript-eslint/no-unsafe-argument --
   the assertions read parsed JSON and log lines dynamically */
/**
 * `sluice serve --workers 2` on the tests' Redis: both workers answer on the same ports over
 * HTTP and gRPC, one `/metrics` and one `/v1/stats` count every worker's decisions, remote
 * clients are counted over both, a worker killed is replaced while the service goes on, SIGHUP
 * reaches both, SIGTERM drains both and exits 0; the embedded store refuses more than one worker.
 */
import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { writeFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { SLUICE_BIN, childEnv, deleteRedisKeys, metric } from '../../../test/sluice-serve.js';
import { call, eventually, loadRlsDefinition, runCli, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

const rules = (limit: number) => `
resources:
  api:w: { limits: { algorithm: fixed-window, limit: ${limit}, windowMs: 3600000 } }
domains:
  - domain: edge
    descriptors:
      - key: tenant
        rate_limit: { unit: hour, requests_per_unit: 1000 }
`;

/** A POST on a connection of its own (cluster hands each connection to the next worker). */
function checkOnNewConnection(base: string, body: object, headers: Record<string, string> = {}): Promise<any> {
  const url = new URL('/v1/check', base);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/json', ...headers },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode, ...JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

/** A ShouldRateLimit on a connection of its own (a local subchannel pool: no connection shared). */
function shouldRateLimitOnNewConnection(port: number, tenant: string): Promise<any> {
  const method = loadRlsDefinition().ShouldRateLimit!;
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      method.path,
      (b: Buffer) => b,
      (b: Buffer) => method.responseDeserialize(b),
      method.requestSerialize({ domain: 'edge', descriptors: [{ entries: [{ key: 'tenant', value: tenant }] }] }),
      new grpc.Metadata(),
      (err: grpc.ServiceError | null, res?: unknown) => {
        client.close();
        resolve(err ? { error: err.code } : res);
      },
    );
  });
}

/** The log lines (parsed) of `s` with message `msg`. */
const linesOf = (s: ServerProcess, msg: string) =>
  s.logs.flatMap((l) => {
    try {
      const e = JSON.parse(l);
      return e.msg === msg ? [e] : [];
    } catch {
      return [];
    }
  });

const workerRequests = (s: ServerProcess, worker: number, transport: string) =>
  metric(s.url, 'sluice_worker_requests_total', `worker="${worker}",transport="${transport}"`);

describe('sluice serve --workers 2', () => {
  const tmp = scratch();
  const prefix = randomPrefix('workers');
  const file = writeRules(tmp.dir, rules(1000));
  let s: ServerProcess;
  let checks = 0;
  beforeAll(async () => {
    s = await spawnServer(
      [
        '--workers',
        '2',
        '--rules',
        file,
        '--rules-mode',
        'files',
        '--redis',
        redisUrl(),
        '--redis-prefix',
        prefix,
        '--store-timeout-ms',
        '2000',
      ],
      { SLUICE_SHUTDOWN_GRACE_MS: '1000' },
    );
  });
  afterAll(async () => {
    await s?.stop('SIGKILL');
    await deleteRedisKeys(prefix);
    tmp.remove();
  });

  it('serves HTTP and gRPC decisions from both workers, on one port each', async () => {
    // Each process writes its own lines: a worker's may come after the primary's.
    await eventually(async () => linesOf(s, 'worker serving').length === 2);
    expect(
      linesOf(s, 'worker serving')
        .map((e) => e.worker)
        .sort(),
    ).toEqual([1, 2]);
    await eventually(async () => {
      const d = await checkOnNewConnection(s.url, { resource: 'api:w', key: 'k' });
      expect(d).toMatchObject({ status: 200, allowed: true });
      checks++;
      return (await workerRequests(s, 1, 'http')) > 0 && (await workerRequests(s, 2, 'http')) > 0;
    });
    await eventually(async () => {
      expect(await shouldRateLimitOnNewConnection(s.grpcPort, 't')).toMatchObject({ overall_code: 'OK' });
      return (await workerRequests(s, 1, 'grpc')) > 0 && (await workerRequests(s, 2, 'grpc')) > 0;
    });
  });

  it("answers /metrics and /v1/stats with both workers' decisions", async () => {
    // Every check above was decided by one worker or the other: the merged figures hold them all.
    expect(await metric(s.url, 'sluice_decisions_total', 'resource="api:w",mode="try",outcome="allowed"')).toBe(checks);
    expect(await metric(s.url, 'sluice_http_requests_total', 'route="/v1/check",method="POST",status="200"')).toBe(checks);
    const text = await (await fetch(new URL('/metrics', s.url))).text();
    expect(text).toMatch(/^sluice_workers 2$/m);
    expect(text).toMatch(/^sluice_rules_version 1$/m);
    const stats = (await call(s.url, '/v1/stats')).json;
    expect(stats.resources.find((r: { resource: string }) => r.resource === 'api:w')).toMatchObject({
      allowed: checks,
      limit: 1000,
    });
  });

  it('counts the remote clients that called either worker', async () => {
    const ids = ['client-a', 'client-b', 'client-c', 'client-d'];
    for (const id of ids) await checkOnNewConnection(s.url, { resource: 'api:w', key: id }, { 'sluice-client-id': id });
    checks += ids.length;
    // Each worker heard of some of them; both answer with the count over both.
    await eventually(async () => (await call(s.url, '/v1/stats')).json.health.clientsSeen === ids.length);
    await eventually(async () => (await call(s.url, '/v1/resources')).json.clients === ids.length);
  });

  it('replaces a worker killed, counts it, and goes on serving', async () => {
    const victim = linesOf(s, 'worker serving').find((e) => e.worker === 1)!;
    process.kill(victim.pid as number, 'SIGKILL');
    await eventually(async () => linesOf(s, 'worker replaced: serving again').length === 1);
    expect(linesOf(s, 'worker died: replacing it')[0]).toMatchObject({ worker: 1, signal: 'SIGKILL' });
    expect(await metric(s.url, 'sluice_worker_restarts_total', 'worker="1"')).toBe(1);
    // Both workers answer again: the new one in slot 1 among them.
    for (let i = 0; i < 6; i++)
      expect(await checkOnNewConnection(s.url, { resource: 'api:w', key: 'after' })).toMatchObject({
        status: 200,
        allowed: true,
      });
    await eventually(async () => linesOf(s, 'worker serving').filter((e) => e.worker === 1).length === 2);
    const fresh = linesOf(s, 'worker serving')
      .filter((e) => e.worker === 1)
      .at(-1)!;
    expect(fresh.pid).not.toBe(victim.pid);
  });

  it('passes SIGHUP to both workers, which both follow the changed rule file', async () => {
    const before = linesOf(s, 'SIGHUP: reading the rule files again').length;
    writeFileSync(file, rules(500));
    s.child.kill('SIGHUP');
    await eventually(async () => {
      const hup = linesOf(s, 'SIGHUP: reading the rule files again').slice(before);
      return hup.some((e) => e.worker === 1) && hup.some((e) => e.worker === 2);
    });
    // Each worker's decisions follow the new version (new connections reach both).
    await eventually(async () => {
      const limits = new Set<number>();
      for (let i = 0; i < 4; i++) limits.add((await checkOnNewConnection(s.url, { resource: 'api:w', key: `v${i}` })).limit);
      return limits.size === 1 && limits.has(500);
    });
    const text = await (await fetch(new URL('/metrics', s.url))).text();
    expect(text).toMatch(/^sluice_rules_version 2$/m);
  });

  it('drains both workers on SIGTERM and exits 0', async () => {
    expect(await s.stop('SIGTERM')).toBe(0);
    const exits = linesOf(s, 'worker exited');
    expect(exits.map((e) => e.worker).sort()).toEqual([1, 2]);
    expect(exits.every((e) => e.code === 0)).toBe(true);
  });
});

describe('sluice serve --workers 2 told to stop while starting', () => {
  it('stops every worker, those still starting too, and exits 0', async () => {
    const tmp = scratch();
    const prefix = randomPrefix('workers-early');
    try {
      const file = writeRules(tmp.dir, rules(10));
      const child = spawn(
        process.execPath,
        [
          SLUICE_BIN,
          'serve',
          '--workers',
          '2',
          '--rules',
          file,
          '--redis',
          redisUrl(),
          '--redis-prefix',
          prefix,
          '--port',
          '0',
          '--grpc-port',
          '0',
        ],
        { env: { ...childEnv(), SLUICE_LOG_FORMAT: 'json' }, stdio: ['ignore', 'pipe', 'inherit'] },
      );
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      let out = '';
      child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
      // As soon as the primary forked its workers, before they serve.
      await eventually(async () => out.includes('starting workers'), 60_000);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(out).not.toContain('"sluice serving"');
    } finally {
      await deleteRedisKeys(prefix);
      tmp.remove();
    }
  });
});

describe('sluice serve --workers on the embedded store', () => {
  it('is refused: the embedded store keeps its state in one process', async () => {
    const tmp = scratch();
    try {
      const file = writeRules(tmp.dir, rules(10));
      const r = await runCli(['serve', '--workers', '2', '--rules', file, '--port', '0', '--grpc-port', '0']);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(
        '--workers 2 shares limits between worker processes through Redis: give --redis or --redis-cluster',
      );
    } finally {
      tmp.remove();
    }
  });
});
