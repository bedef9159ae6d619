import { MAX_TRACKED_CLIENTS, ClientCounter } from '../clients/client-ids.js';
import {
  CLIENTS_REPORT_MS,
  GATHER_TIMEOUT_MS,
  MAX_PENDING_GATHERS,
  isSluiceMessage,
  type GatherKind,
  type PrimaryMessage,
  type WorkerMessage,
} from './protocol.js';

/** The IPC channel to the primary: `process` in a cluster worker, a fake in unit tests. */
export interface Channel {
  send(message: WorkerMessage): void;
  on(event: 'message', listener: (message: unknown) => void): void;
  off(event: 'message', listener: (message: unknown) => void): void;
}

/**
 * A worker's side of `sluice serve --workers N`: answers the primary's requests for this
 * worker's figures, gathers every worker's through the primary, and keeps the live-client count
 * of the whole fleet of workers.
 */
export class WorkerLink {
  /** This worker's slot, 1..N: the `worker` label of its figures and log lines. */
  readonly slot: number;
  /** The live remote clients over every worker (see {@link FleetClientCounter}). */
  readonly clients: FleetClientCounter;
  readonly #channel: Channel;
  readonly #providers = new Map<GatherKind, (arg: unknown) => Promise<unknown>>();
  readonly #pending = new Map<
    number,
    { resolve: (v: readonly unknown[]) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }
  >();
  #nextId = 1;
  readonly #listener: (m: unknown) => void;
  readonly #report: NodeJS.Timeout;
  /** Called on the primary's `reload` and `shutdown`. */
  onReload: () => void = () => {};
  onShutdown: () => void = () => {};

  constructor(slot: number, channel: Channel = process as unknown as Channel) {
    this.slot = slot;
    this.#channel = channel;
    this.clients = new FleetClientCounter();
    this.#listener = (m) => {
      if (isSluiceMessage<PrimaryMessage>(m)) this.#receive(m);
    };
    channel.on('message', this.#listener);
    this.#report = setInterval(() => this.#reportClients(), CLIENTS_REPORT_MS).unref();
  }

  /** Answers the primary's `collect` of `kind` with `fn` (this worker's own figures). */
  provide(kind: GatherKind, fn: (arg: unknown) => Promise<unknown>): void {
    this.#providers.set(kind, fn);
  }

  /** Every worker's answer to `kind` (and, for metrics, the primary's own figures). */
  gather(kind: GatherKind, arg: unknown = null): Promise<readonly unknown[]> {
    if (this.#pending.size >= MAX_PENDING_GATHERS) {
      return Promise.reject(new Error(`more than ${MAX_PENDING_GATHERS} requests are already gathering the workers' figures`));
    }
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`the workers' figures did not come within ${GATHER_TIMEOUT_MS} ms`));
      }, GATHER_TIMEOUT_MS + 1000);
      this.#pending.set(id, { resolve, reject, timer });
      this.#send({ sluice: 'gather', id, kind, arg });
    });
  }

  /** Tells the primary this worker serves. */
  serving(url: string | undefined, grpcPort: number | undefined): void {
    this.#send({ sluice: 'serving', url, grpcPort });
  }

  /** Stops listening to the primary; gathers still waiting are refused. */
  close(): void {
    clearInterval(this.#report);
    this.#channel.off('message', this.#listener);
    for (const [id, p] of this.#pending) {
      clearTimeout(p.timer);
      p.reject(new Error('the worker is shutting down'));
      this.#pending.delete(id);
    }
  }

  #receive(m: PrimaryMessage): void {
    switch (m.sluice) {
      case 'gathered': {
        const p = this.#pending.get(m.id);
        if (p === undefined) return;
        this.#pending.delete(m.id);
        clearTimeout(p.timer);
        if (m.values !== undefined) p.resolve(m.values);
        else p.reject(new Error(m.error ?? 'the primary did not gather the figures'));
        return;
      }
      case 'collect': {
        const fn = this.#providers.get(m.kind);
        const answer = fn === undefined ? Promise.reject(new Error(`worker ${this.slot} is not serving yet`)) : fn(m.arg);
        answer.then(
          (value) => this.#send({ sluice: 'collected', id: m.id, value }),
          (err: unknown) =>
            this.#send({ sluice: 'collected', id: m.id, error: err instanceof Error ? err.message : String(err) }),
        );
        return;
      }
      case 'clients':
        this.clients.fleetCount = m.count;
        return;
      case 'reload':
        this.onReload();
        return;
      case 'shutdown':
        this.onShutdown();
        return;
    }
  }

  #reportClients(): void {
    const r = this.clients.takeReport();
    if (r.seen.length > 0 || r.gone.length > 0) this.#send({ sluice: 'clients', ...r });
  }

  #send(m: WorkerMessage): void {
    // The channel is gone once the primary is: the worker then shuts down (see the CLI).
    try {
      this.#channel.send(m);
    } catch {
      /* the disconnect is handled where the worker listens for it */
    }
  }
}

/**
 * The live remote clients of a worker, counted over every worker: each worker notes the clients
 * that call it and reports them to the primary once a second; the primary counts them (the same
 * {@link ClientCounter} rules) and sends every worker the count. `count()` is the larger of the
 * fleet's last count and this worker's own, so a client that only this worker heard of counts at
 * once. The count follows a second or two behind the calls.
 */
export class FleetClientCounter extends ClientCounter {
  /** The count over every worker, as the primary last sent it. */
  fleetCount = 0;
  /** Since the last report: id -> heartbeat header (bounded as the counter is). */
  #seen = new Map<string, string | undefined>();
  #gone = new Set<string>();

  override note(id: unknown, heartbeat?: unknown): void {
    super.note(id, heartbeat);
    if (typeof id !== 'string' || (!this.#seen.has(id) && this.#seen.size >= MAX_TRACKED_CLIENTS)) return;
    this.#gone.delete(id);
    this.#seen.set(id, typeof heartbeat === 'string' ? heartbeat : undefined);
  }

  override goodbye(id: unknown): boolean {
    const counted = super.goodbye(id);
    if (typeof id === 'string' && this.#gone.size < MAX_TRACKED_CLIENTS) {
      this.#seen.delete(id);
      this.#gone.add(id);
    }
    return counted;
  }

  override count(): number {
    return Math.max(super.count(), this.fleetCount);
  }

  /** The clients heard of and gone since the last report; starts the next. */
  takeReport(): { seen: [string, string | undefined][]; gone: string[] } {
    const r = { seen: [...this.#seen], gone: [...this.#gone] };
    this.#seen = new Map();
    this.#gone = new Set();
    return r;
  }
}
