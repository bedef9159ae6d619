import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

/** A redis-server owned by the bench: on loopback, no persistence, stopped by {@link stop}. */
export interface ThrowawayRedis {
  readonly url: string;
  readonly port: number;
  readonly version: string;
  /** Ends it with SIGTERM and waits for the exit. */
  stop(): Promise<void>;
  /** Ends it with SIGKILL (a crash: no shutdown, sockets reset) and waits for the exit. */
  kill(): Promise<void>;
}

/** Where and how {@link startThrowawayRedis} starts a server. */
export interface ThrowawayOptions {
  /** @default a free port */
  readonly port?: number;
  /** How often to ping while waiting for it to answer, ms. @default 50 */
  readonly pollMs?: number;
  /** More server arguments, e.g. cluster mode. */
  readonly args?: readonly string[];
}

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const START_TIMEOUT_MS = 10_000;

function hasRedisServer(): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

let version: string | undefined;

function redisVersion(): string {
  if (version === undefined) {
    const out = spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).stdout;
    version = /v=([0-9.]+)/.exec(out)?.[1] ?? 'unknown';
  }
  return version;
}

/** Stop functions of every server started and not yet stopped, for a stop on a signal. */
const live = new Set<() => Promise<void>>();

/** Stops every server the bench started that is still running (on a signal or a failure). */
export async function stopAllServers(): Promise<void> {
  await Promise.allSettled([...live].map((stop) => stop()));
}

/** A port nobody listens on right now (the kernel picks it). */
export async function freePort(): Promise<number> {
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
export async function startThrowawayRedis(options: ThrowawayOptions = {}): Promise<ThrowawayRedis> {
  if (!hasRedisServer()) {
    console.error('redis-server not found on PATH; installing it with scripts/redis-servers.sh install');
    const install = spawnSync('bash', [resolve(REPO_ROOT, 'scripts/redis-servers.sh'), 'install'], {
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    if (install.status !== 0 || !hasRedisServer()) throw new Error('could not install redis-server');
  }
  // Read (and cached) before the start, so a restart's readiness is not delayed by it.
  const serverVersion = redisVersion();
  const port = options.port ?? (await freePort());
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
      ...(options.args ?? []),
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  let exited = false;
  const exit = once(child, 'exit').then(() => {
    exited = true;
    live.delete(stop);
  });
  const stop = async (): Promise<void> => {
    if (!exited) child.kill('SIGTERM');
    await exit;
  };
  live.add(stop);
  const kill = async (): Promise<void> => {
    if (!exited) child.kill('SIGKILL');
    await exit;
  };
  const deadline = performance.now() + START_TIMEOUT_MS;
  while (!(await pings(port))) {
    if (exited || performance.now() > deadline) {
      await stop();
      throw new Error(`redis-server did not start on 127.0.0.1:${port}`);
    }
    await sleep(options.pollMs ?? 50);
  }
  return { url: `redis://127.0.0.1:${port}`, port, version: serverVersion, stop, kill };
}

/** A Redis Cluster of masters without replicas, owned by the bench. */
export interface ThrowawayCluster {
  /** `host:port` of every master, in slot order (the first holds slots 0..). */
  readonly nodes: readonly string[];
  /** The slots each master serves, `[first, last]`, in the order of `nodes`. */
  readonly slots: readonly (readonly [number, number])[];
  readonly servers: readonly ThrowawayRedis[];
  stop(): Promise<void>;
}

/** True if nothing listens on the port (binding it succeeds). */
async function portFree(port: number): Promise<boolean> {
  const server = createServer();
  server.on('error', () => undefined);
  server.listen(port, '127.0.0.1');
  const ok = await Promise.race([once(server, 'listening').then(() => true), once(server, 'error').then(() => false)]);
  if (ok) {
    server.close();
    await once(server, 'close');
  }
  return ok;
}

/** A free port whose cluster bus port (port + 10000) is free too. */
async function freeClusterPort(taken: readonly number[]): Promise<number> {
  for (let i = 0; i < 100; i++) {
    const port = 20_000 + Math.floor(Math.random() * 30_000);
    if (taken.includes(port) || taken.includes(port + 10_000) || taken.includes(port - 10_000)) continue;
    if ((await portFree(port)) && (await portFree(port + 10_000))) return port;
  }
  throw new Error('could not find free ports for a Redis Cluster');
}

const CLUSTER_SLOTS = 16_384;

/**
 * Starts `masters` cluster-enabled redis-servers on free loopback ports (no replicas, no
 * persistence, node files in a temporary directory), assigns each an equal range of slots, joins
 * them and waits until every node reports the cluster ok.
 */
export async function startThrowawayCluster(masters: number): Promise<ThrowawayCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-bench-cluster-'));
  const servers: ThrowawayRedis[] = [];
  const clients: Redis[] = [];
  const stop = async (): Promise<void> => {
    for (const c of clients) c.disconnect();
    await Promise.all(servers.map((s) => s.stop()));
    await rm(dir, { recursive: true, force: true });
    live.delete(stop);
  };
  // Also stopped (and its directory removed) by stopAllServers.
  live.add(stop);
  try {
    const ports: number[] = [];
    const slots: [number, number][] = [];
    for (let i = 0; i < masters; i++) {
      const port = await freeClusterPort(ports);
      ports.push(port);
      servers.push(
        await startThrowawayRedis({
          port,
          args: ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`), '--dir', dir],
        }),
      );
    }
    for (const port of ports) {
      const client = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 1 });
      await client.connect();
      clients.push(client);
    }
    for (const [i, client] of clients.entries()) {
      const from = Math.floor((CLUSTER_SLOTS * i) / masters);
      const to = Math.floor((CLUSTER_SLOTS * (i + 1)) / masters) - 1;
      slots.push([from, to]);
      await client.call('CLUSTER', 'ADDSLOTSRANGE', String(from), String(to));
    }
    for (const port of ports.slice(1)) await clients[0]!.call('CLUSTER', 'MEET', '127.0.0.1', String(port));
    const deadline = performance.now() + START_TIMEOUT_MS;
    for (;;) {
      const infos = await Promise.all(clients.map((c) => c.call('CLUSTER', 'INFO') as Promise<string>));
      const ok = infos.every(
        (info) => /cluster_state:ok/.test(info) && new RegExp(`cluster_known_nodes:${masters}\\b`).test(info),
      );
      if (ok) break;
      if (performance.now() > deadline) throw new Error(`the Redis Cluster on ports ${ports.join(', ')} did not become ok`);
      await sleep(50);
    }
    for (const c of clients) c.disconnect();
    clients.length = 0;
    return { nodes: ports.map((p) => `127.0.0.1:${p}`), slots, servers, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
