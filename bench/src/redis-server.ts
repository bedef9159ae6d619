import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createConnection, createServer } from 'node:net';
import { dirname, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

/** A redis-server owned by the bench: on loopback, no persistence, stopped by {@link stop}. */
export interface ThrowawayRedis {
  readonly url: string;
  readonly version: string;
  stop(): Promise<void>;
}

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const START_TIMEOUT_MS = 10_000;

function hasRedisServer(): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

function redisVersion(): string {
  const out = spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).stdout;
  return /v=([0-9.]+)/.exec(out)?.[1] ?? 'unknown';
}

/** A port nobody listens on right now (the kernel picks it). */
async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  await once(server, 'close');
  if (address === null || typeof address === 'string') throw new Error('could not find a free port');
  return address.port;
}

/** Resolves true when the server answers PING with PONG. */
async function pings(port: number): Promise<boolean> {
  return new Promise((resolvePing) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolvePing(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.on('error', () => done(false));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString('latin1');
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

/**
 * Starts `redis-server` from PATH on a free loopback port (installing it with
 * `scripts/redis-servers.sh install` when missing) and waits until it answers.
 */
export async function startThrowawayRedis(): Promise<ThrowawayRedis> {
  if (!hasRedisServer()) {
    console.error('redis-server not found on PATH; installing it with scripts/redis-servers.sh install');
    const install = spawnSync('bash', [resolve(REPO_ROOT, 'scripts/redis-servers.sh'), 'install'], {
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    if (install.status !== 0 || !hasRedisServer()) throw new Error('could not install redis-server');
  }
  const port = await freePort();
  const child: ChildProcess = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--daemonize',
      'no',
      '--loglevel',
      'warning',
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  let exited = false;
  const exit = once(child, 'exit').then(() => {
    exited = true;
  });
  const stop = async (): Promise<void> => {
    if (!exited) child.kill('SIGTERM');
    await exit;
  };
  const deadline = performance.now() + START_TIMEOUT_MS;
  while (!(await pings(port))) {
    if (exited || performance.now() > deadline) {
      await stop();
      throw new Error(`redis-server did not start on 127.0.0.1:${port}`);
    }
    await sleep(50);
  }
  return { url: `redis://127.0.0.1:${port}`, version: redisVersion(), stop };
}
