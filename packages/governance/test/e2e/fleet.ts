/**
 * A fleet of real processes for the governance end-to-end tests: gateway processes (node:http
 * behind @sluice/gateway) and aggregator processes, all on one event stream, driven over IPC.
 * The fixtures import the built packages (`npm run build` first, as scripts/test-all.sh does).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));

/** How fixture processes build their transport; see fixtures/transport.mjs. */
export interface TransportSpec {
  readonly kind: 'redis' | 'nats' | 'rocketmq';
  readonly partitions: number;
  readonly prefix: string;
  readonly [key: string]: unknown;
}

/** A child process answering `{ type: 'stats' }` over IPC. */
class Member {
  readonly child: ChildProcess;
  #seq = 0;

  constructor(child: ChildProcess) {
    this.child = child;
  }

  /** Waits for the process's `ready` message (or fails when it exits first). */
  async ready<T>(): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`fixture exited with ${code} before it was ready`));
      this.child.once('exit', onExit);
      this.child.on('message', (m: { type: string }) => {
        if (m.type === 'ready') {
          this.child.off('exit', onExit);
          resolve(m as T);
        }
      });
    });
  }

  /** Asks the process for its counters. */
  stats<T>(): Promise<T> {
    const id = ++this.#seq;
    return new Promise<T>((resolve, reject) => {
      const onExit = () => reject(new Error('fixture exited before answering'));
      const onMessage = (m: { type: string; id?: number }) => {
        if (m.type !== 'stats' || m.id !== id) return;
        this.child.off('message', onMessage);
        this.child.off('exit', onExit);
        resolve(m as T);
      };
      this.child.once('exit', onExit);
      this.child.on('message', onMessage);
      this.child.send({ type: 'stats', id }, (err) => {
        if (err) reject(err);
      });
    });
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Asks the process to close cleanly; kills it if it does not exit in time. */
  async close(): Promise<void> {
    if (!this.alive) return;
    const exited = once(this.child, 'exit');
    this.child.send({ type: 'close' }, () => undefined);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }

  /** SIGKILL: no cleanup at all, as when a machine dies. */
  async kill(): Promise<void> {
    if (!this.alive) return;
    const exited = once(this.child, 'exit');
    this.child.kill('SIGKILL');
    await exited;
  }
}

/** Counters a gateway process reports. */
export interface GatewayStats {
  readonly probe: { sent: number; batches: number; publishErrors: number; dropped: Record<string, number> };
  readonly cache: { size: number; blocks: number; lifts: number; expired: number };
}

/** A gateway process and its HTTP port. */
export class GatewayProcess extends Member {
  port = 0;

  static async start(spec: TransportSpec): Promise<GatewayProcess> {
    const g = new GatewayProcess(
      fork(fixture('gateway.mjs'), [JSON.stringify(spec)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
    );
    g.port = (await g.ready<{ port: number }>()).port;
    return g;
  }

  /** One request; resolves to the status. */
  async request(path: string, headers: Record<string, string> = {}): Promise<number> {
    const res = await fetch(`http://127.0.0.1:${this.port}${path}`, { headers });
    await res.arrayBuffer();
    return res.status;
  }

  async counters(): Promise<GatewayStats> {
    return this.stats<GatewayStats>();
  }
}

/** Counters an aggregator process reports. */
export interface AggregatorReport {
  readonly partitions: number[];
  readonly stats: {
    batches: number;
    blocksSent: number;
    liftsSent: number;
    snapshotsRestored: number;
    malformedBatches: number;
    events: number;
    ruleVersion: number;
  };
}

/** An aggregator process. */
export class AggregatorProcess extends Member {
  static async start(
    spec: TransportSpec,
    settings: { rulesDir: string; redisUrl: string; ownershipPrefix: string; id: string },
  ): Promise<AggregatorProcess> {
    const a = new AggregatorProcess(
      fork(fixture('aggregator.mjs'), [JSON.stringify(spec), JSON.stringify(settings)], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      }),
    );
    await a.ready();
    return a;
  }

  async report(): Promise<AggregatorReport> {
    return this.stats<AggregatorReport>();
  }
}

/**
 * Polls `check` until it returns a value other than undefined, at most `limitMs` (a generous
 * bound for a shared, slow machine: this never measures how fast anything is).
 */
export async function until<T>(
  what: string,
  check: () => Promise<T | undefined>,
  limitMs = 20_000,
  everyMs = 100,
  /** What to add to the error when the wait gives up (the state that would explain it). */
  explain?: () => Promise<string>,
): Promise<T> {
  const end = Date.now() + limitMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) {
      const state = explain === undefined ? '' : `; state: ${await explain().catch((e: unknown) => String(e))}`;
      throw new Error(`gave up waiting for ${what}${last instanceof Error ? `: ${last.message}` : ''}${state}`);
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
