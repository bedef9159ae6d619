/**
 * A throwaway redis-server owned by one test file, for drills that kill, freeze or restart it
 * (the shared servers from scripts/redis-servers.sh must stay up for other tests).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { once } from 'node:events';
import { Redis } from 'ioredis';

/** A free loopback port (the OS picks one; a race with other processes is unlikely). */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  server.close();
  await once(server, 'close');
  return port;
}

export class RedisProcess {
  #child: ChildProcess | undefined;

  private constructor(readonly port: number) {}

  static async start(): Promise<RedisProcess> {
    const r = new RedisProcess(await freePort());
    await r.restart();
    return r;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Starts (again) on the same port and waits until it answers PING. */
  async restart(): Promise<void> {
    if (this.#child && this.#child.exitCode === null && this.#child.signalCode === null) return;
    this.#child = spawn(
      'redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--enable-debug-command', 'local'],
      { stdio: 'ignore' },
    );
    const deadline = Date.now() + 10_000;
    for (;;) {
      const probe = new Redis(this.port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      // Refused connections are expected until the server is up; connect() reports them.
      probe.on('error', () => {});
      try {
        await probe.connect();
        await probe.ping();
        return;
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`redis-server on ${this.port} did not start`, { cause: err });
        await new Promise((r) => setTimeout(r, 50));
      } finally {
        probe.disconnect();
      }
    }
  }

  /** Sends a signal: SIGKILL to crash it, SIGSTOP/SIGCONT to freeze and thaw it. */
  signal(sig: NodeJS.Signals): void {
    this.#child?.kill(sig);
  }

  /** Kills it and waits for the exit. */
  async kill(): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGCONT');
    child.kill('SIGKILL');
    await exited;
  }

  async stop(): Promise<void> {
    await this.kill();
    this.#child = undefined;
  }
}
