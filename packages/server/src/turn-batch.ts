/**
 * Runs the calls started during one turn of the event loop together, once the turn's I/O has
 * been read (`setImmediate`). Requests of different connections arrive in separate I/O
 * callbacks; a store that gathers the calls of one callback into one round trip (the Redis
 * store queues them until `process.nextTick`) would otherwise send one round trip per request.
 * Started together, they share one: under load, many requests per write instead of one. The
 * cost is at most one turn of the loop before a call starts.
 */
export class TurnBatch {
  #pending: (() => void)[] = [];
  #scheduled = false;

  /** Starts `call` with the other calls of this turn; settles as it does. */
  defer<T>(call: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#pending.push(() => {
        try {
          call().then(resolve, reject);
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(this.#run);
      }
    });
  }

  readonly #run = (): void => {
    this.#scheduled = false;
    const pending = this.#pending;
    this.#pending = [];
    for (const start of pending) start();
  };
}
