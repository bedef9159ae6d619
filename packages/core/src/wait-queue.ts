import type { Clock, TimerHandle } from './clock.js';
import type { Decision } from './decision.js';

/** One caller waiting in `acquire`. */
export interface Waiter {
  readonly cost: number;
  readonly deadline: number;
  readonly startedAt: number;
  readonly resolve: (d: Decision) => void;
  readonly reject: (e: unknown) => void;
  /** Set while the pump is asking the store on this waiter's behalf. */
  inFlight: boolean;
  /** Set once resolved or rejected; a late grant is then given back. */
  done: boolean;
  timer?: TimerHandle;
  detach?: () => void;
}

/**
 * The waiters of one key in arrival order, plus the pump's wakeable sleep. Only the head asks
 * the store, paced by the retry-after of the last denial, so waiters never stampede and nothing
 * polls in a loop.
 */
export class WaitQueue {
  readonly waiters: Waiter[] = [];
  running = false;
  /** The last denial seen for this key; used to answer waiters that give up. */
  last: Decision;
  #sleepTimer: TimerHandle | undefined;
  #wake: (() => void) | undefined;

  constructor(
    private readonly clock: Clock,
    last: Decision,
  ) {
    this.last = last;
  }

  /** Removes a waiter (no-op when absent). */
  remove(w: Waiter): void {
    const i = this.waiters.indexOf(w);
    if (i >= 0) this.waiters.splice(i, 1);
    if (this.waiters.length === 0) this.wake();
  }

  /** Sleeps `ms` unless woken earlier by {@link wake}. */
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.#wake = () => {
        if (this.#sleepTimer !== undefined) this.clock.clearTimer(this.#sleepTimer);
        this.#sleepTimer = undefined;
        this.#wake = undefined;
        resolve();
      };
      this.#sleepTimer = this.clock.setTimer(this.#wake, ms);
    });
  }

  /** Ends a sleep now, e.g. when a permit was released locally or the queue emptied. */
  wake(): void {
    this.#wake?.();
  }
}
