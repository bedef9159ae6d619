/**
 * `sluice serve` on a Redis that may evict live limit state, or grow without bound, says so at
 * start. Runs a Redis server of its own (its configuration is changed between starts), and the
 * built CLI (so `npm run build` first).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rulesFile, spawnSluice } from '../sluice-serve.js';

const RULES = `
resources:
  api: { limits: { algorithm: fixed-window, limit: 10, windowMs: 1000 } }
`;

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  return port;
}

describe('the Redis memory policy at start', () => {
  const rules = rulesFile(RULES);
  let redisServer: ChildProcess;
  let admin: Redis;
  let url: string;

  beforeAll(async () => {
    const port = await freePort();
    url = `redis://127.0.0.1:${port}`;
    redisServer = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
    admin = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0 });
    admin.on('error', () => undefined);
    // A bound on a hang, not an expected duration.
    for (let tries = 0; (await admin.ping().catch(() => '')) !== 'PONG'; tries++) {
      if (tries > 200) throw new Error('the test Redis never answered');
      await new Promise((r) => setTimeout(r, 50));
    }
  });
  afterAll(async () => {
    admin?.disconnect();
    redisServer?.kill();
    rules.remove();
  });

  /** The warnings `sluice serve` logs at start on the test Redis as configured now. */
  async function startWarnings(): Promise<string[]> {
    const serve = await spawnSluice(['--rules', rules.path, '--port', '0', '--grpc-port', '0', '--redis', url]);
    await serve.stop();
    return serve.logs.filter((l) => l.includes('"level":"warn"') && l.includes('Redis'));
  }

  it('warns of an evicting policy, of no maxmemory, and is quiet on maxmemory with noeviction', async () => {
    await admin.config('SET', 'maxmemory', '64mb', 'maxmemory-policy', 'allkeys-lru');
    const evicting = await startWarnings();
    expect(evicting.join('\n')).toMatch(/maxmemory-policy allkeys-lru: it may evict live limit state/);

    await admin.config('SET', 'maxmemory-policy', 'volatile-ttl');
    expect((await startWarnings()).join('\n')).toMatch(/maxmemory-policy volatile-ttl/);

    await admin.config('SET', 'maxmemory', '0', 'maxmemory-policy', 'noeviction');
    expect((await startWarnings()).join('\n')).toMatch(/has no maxmemory/);

    await admin.config('SET', 'maxmemory', '64mb');
    expect(await startWarnings()).toEqual([]);
  });
});
