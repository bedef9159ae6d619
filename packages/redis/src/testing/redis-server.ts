import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createConnection, createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** How {@link RedisServer.start} starts a server. */
export interface RedisServerOptions {
  /** The loopback port. @default a free port ({@link freePort}) */
  readonly port?: number;
  /** How often to ping while waiting for it to answer, ms. @default 50 */
  readonly pollMs?: number;
  /** How long it may take to answer PING, ms. @default 10000 */
  readonly startTimeoutMs?: number;
  /** More server arguments, e.g. cluster mode. */
  readonly args?: readonly string[];
}

/** Stop functions of every server started and not yet stopped, for {@link stopAllRedisServers}. */
const live = new Set<() => Promise<void>>();

/** Adds a stop function to what {@link stopAllRedisServers} stops; the returned function takes it off. */
export function trackForStopAll(stop: () => Promise<void>): () => void {
  live.add(stop);
  return () => live.delete(stop);
}

/**
 * Stops every server (and cluster) started here that is still running: for a process that ends on
 * a signal or a failure.
 */
export async function stopAllRedisServers(): Promise<void> {
  await Promise.allSettled([...live].map((stop) => stop()));
}

/** A loopback port nobody listens on right now (the kernel picks it; a race with others is unlikely). */
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

/** True when `redis-server` is on PATH. */
export function hasRedisServer(): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

let version: string | undefined;

/** The version of `redis-server` on PATH (`7.0.15`), or `unknown`; read once. */
export function redisServerVersion(): string {
  if (version === undefined) {
    const out = spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).stdout ?? '';
    version = /v=([0-9.]+)/.exec(out)?.[1] ?? 'unknown';
  }
  return version;
}

/**
 * The process id of the server answering on the port (from `INFO server`), or undefined while
 * nothing answers, so that a server already on the port is not taken for the one just started.
 */
async function answeringPid(port: number): Promise<number | undefined> {
  return new Promise((resolvePid) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (pid: number | undefined) => {
      socket.destroy();
      resolvePid(pid);
    };
    socket.setTimeout(500, () => done(undefined));
    socket.on('error', () => done(undefined));
    socket.on('connect', () => socket.write('INFO server\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString('latin1');
      // An error reply (e.g. -LOADING) means not ready yet.
      if (reply.startsWith('-')) return done(undefined);
      const pid = /\r\nprocess_id:(\d+)\r\n/.exec(reply)?.[1];
      if (pid !== undefined) done(Number(pid));
    });
  });
}

/**
 * A throwaway `redis-server` from PATH on loopback (no persistence, `DEBUG` allowed from loopback)
 * for tests and benchmarks that crash, freeze or restart it, so that shared servers stay up. Each
 * one is stopped by {@link stop} or by {@link stopAllRedisServers}.
 *
 * @example
 * import { RedisServer } from '@sluice/redis/testing';
 * const redis = await RedisServer.start();
 * await redis.kill(); // a crash: sockets reset, no shutdown
 * await redis.restart(); // the same port, empty
 * await redis.stop();
 */
export class RedisServer {
  #child: ChildProcess | undefined;
  #exit: Promise<void> = Promise.resolve();
  readonly #options: RedisServerOptions;
  #untrack: (() => void) | undefined;

  private constructor(
    /** The loopback port it listens on (the same across restarts). */
    readonly port: number,
    options: RedisServerOptions,
  ) {
    this.#options = options;
  }

  /** Starts a server and waits until it answers PING. */
  static async start(options: RedisServerOptions = {}): Promise<RedisServer> {
    if (!hasRedisServer()) throw new Error('redis-server not found on PATH');
    // Read (and cached) before the start, so a restart's readiness is not delayed by it.
    redisServerVersion();
    const server = new RedisServer(options.port ?? (await freePort()), options);
    try {
      await server.restart();
    } catch (err) {
      await server.stop();
      throw err;
    }
    return server;
  }

  /** `redis://127.0.0.1:<port>`. */
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** The version of the server binary (`7.0.15`), or `unknown`. */
  get version(): string {
    return redisServerVersion();
  }

  /** The process id while it runs. */
  get pid(): number | undefined {
    return this.#running() ? this.#child?.pid : undefined;
  }

  #running(): boolean {
    return this.#child !== undefined && this.#child.exitCode === null && this.#child.signalCode === null;
  }

  /** Starts it (again, after {@link kill} or {@link stop}) on the same port and waits until it answers PING. */
  async restart(): Promise<void> {
    if (this.#running()) return;
    this.#untrack ??= trackForStopAll(() => this.stop());
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
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
        '--enable-debug-command',
        'local',
        ...(this.#options.args ?? []),
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    this.#child = child;
    this.#exit = new Promise((resolve) => {
      child.once('exit', () => resolve());
      // A spawn that fails (no such binary) emits only 'error'.
      child.once('error', () => resolve());
    });
    const deadline = performance.now() + (this.#options.startTimeoutMs ?? 10_000);
    while ((await answeringPid(this.port)) !== child.pid) {
      if (child.exitCode !== null || child.signalCode !== null || performance.now() > deadline) {
        await this.kill();
        throw new Error(`redis-server did not start on 127.0.0.1:${this.port}`);
      }
      await sleep(this.#options.pollMs ?? 50);
    }
  }

  /** Sends a signal: SIGSTOP to freeze it, SIGCONT to thaw it (SIGKILL: prefer {@link kill}). */
  signal(sig: NodeJS.Signals): void {
    if (this.#running()) this.#child!.kill(sig);
  }

  /** Ends it with SIGKILL (a crash: no shutdown, sockets reset), frozen or not, and waits for the exit. */
  async kill(): Promise<void> {
    await this.#end('SIGKILL');
  }

  /** Ends it with SIGTERM (thawed first, if frozen), waits for the exit, and forgets it for {@link stopAllRedisServers}. */
  async stop(): Promise<void> {
    await this.#end('SIGTERM');
    this.#untrack?.();
    this.#untrack = undefined;
  }

  async #end(sig: NodeJS.Signals): Promise<void> {
    if (this.#running()) {
      this.#child!.kill('SIGCONT');
      this.#child!.kill(sig);
    }
    await this.#exit;
  }
}
