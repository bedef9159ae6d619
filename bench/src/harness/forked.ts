import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';

/** What every worker may answer instead of its reply: the error that ended its handling. */
export interface Failed {
  readonly type: 'failed';
  readonly error: string;
}

/**
 * A forked worker process spoken to over IPC, with a queue of its replies. `name` is for errors
 * (`<name> exited`, `<name> failed: ...`).
 */
export class ForkedWorker<To extends { readonly type: string }, From extends { readonly type: string }> {
  readonly #child: ChildProcess;
  readonly #inbox: (From | Failed)[] = [];
  readonly #name: string;
  #wake: (() => void) | undefined;
  readonly exited: Promise<unknown>;

  constructor(name: string, script: string, args: readonly string[] = [], execArgv: readonly string[] = []) {
    this.#name = name;
    this.#child = fork(script, [...args], { execArgv: [...execArgv], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.exited = once(this.#child, 'exit');
    this.#child.on('message', (m: From | Failed) => {
      this.#inbox.push(m);
      this.#wake?.();
    });
    this.#child.on('exit', () => this.#wake?.());
  }

  send(message: To | { readonly type: 'quit' }): void {
    this.#child.send(message);
  }

  /** The next reply; throws if the worker failed or exited. */
  async next(): Promise<From> {
    while (this.#inbox.length === 0) {
      if (this.#child.exitCode !== null || this.#child.signalCode !== null) throw new Error(`${this.#name} exited`);
      await new Promise<void>((resolve) => (this.#wake = resolve));
      this.#wake = undefined;
    }
    const m = this.#inbox.shift()!;
    if (m.type === 'failed') throw new Error(`${this.#name} failed: ${(m as Failed).error}`);
    return m as From;
  }

  /** The next reply, which must be of `type`. */
  async expect<T extends From['type']>(type: T): Promise<Extract<From, { type: T }>> {
    const m = await this.next();
    if (m.type !== type) throw new Error(`unexpected ${m.type} from ${this.#name} (expected ${type})`);
    return m as Extract<From, { type: T }>;
  }

  /** Asks the worker to quit (killing it after 5 s) and waits for it to exit. */
  async stop(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      if (this.#child.connected) this.send({ type: 'quit' });
      const timer = setTimeout(() => this.#child.kill('SIGKILL'), 5000);
      await this.exited;
      clearTimeout(timer);
    }
  }
}

/** The text a worker reports for an error. */
export function errorText(err: unknown): string {
  return err instanceof Error ? (err.stack ?? err.message) : String(err);
}
