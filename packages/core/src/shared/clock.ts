/**
 * Time as Sluice sees it: a monotonic millisecond counter plus timers. Algorithms never read a
 * clock themselves; the in-memory store and the limiter read one of these, and tests inject a
 * {@link ManualClock} so that no test sleeps.
 */
export interface Clock {
  /** Monotonic milliseconds; only differences are meaningful. */
  now(): number;
  /**
   * Runs `fn` after `ms`. With `background`, the timer does not keep the process alive (for
   * housekeeping such as sweeps); waits that a caller awaits keep it alive.
   */
  setTimer(fn: () => void, ms: number, background?: boolean): TimerHandle;
  /** Cancels a timer; unknown or fired handles are ignored. */
  clearTimer(handle: TimerHandle): void;
}

/** Opaque timer handle. */
export type TimerHandle = { readonly __timer: unique symbol } | object;

/** `performance`, looked up once: the global is a getter in Node, and the store reads the clock on every decision. */
const perf = globalThis.performance;

/** The process's monotonic clock (`performance.now()`) and Node timers. */
export const systemClock: Clock = {
  now: () => perf.now(),
  setTimer: (fn, ms, background) => {
    const t = setTimeout(fn, Math.max(0, ms));
    if (background) t.unref();
    return t;
  },
  clearTimer: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

interface ManualTimer {
  readonly at: number;
  readonly seq: number;
  readonly fn: () => void;
}

/**
 * A clock that only moves when told to. Timers fire in time order during {@link advance}.
 *
 * @example
 * const clock = new ManualClock();
 * const store = new MemoryStore({ clock });
 * clock.advance(1000);
 */
export class ManualClock implements Clock {
  #now: number;
  #seq = 0;
  #timers = new Set<ManualTimer>();

  constructor(start = 0) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimer(fn: () => void, ms: number): TimerHandle {
    const timer: ManualTimer = { at: this.#now + Math.max(0, ms), seq: this.#seq++, fn };
    this.#timers.add(timer);
    return timer;
  }

  clearTimer(handle: TimerHandle): void {
    this.#timers.delete(handle as ManualTimer);
  }

  /** Number of timers waiting to fire. */
  get pendingTimers(): number {
    return this.#timers.size;
  }

  /** Moves time forward by `ms`, firing due timers in order (timers set by timers included). */
  advance(ms: number): void {
    const target = this.#now + ms;
    for (let next = this.#due(target); next; next = this.#due(target)) this.#fire(next);
    this.#now = target;
  }

  /**
   * Like {@link advance}, but lets promise callbacks and I/O callbacks run after each timer, so
   * async code woken by a timer can set its next timer before time moves on.
   */
  async advanceAsync(ms: number): Promise<void> {
    const target = this.#now + ms;
    await flush();
    for (let next = this.#due(target); next; next = this.#due(target)) {
      this.#fire(next);
      await flush();
    }
    this.#now = target;
    await flush();
  }

  #due(target: number): ManualTimer | undefined {
    let next: ManualTimer | undefined;
    for (const t of this.#timers) {
      if (t.at <= target && (!next || t.at < next.at || (t.at === next.at && t.seq < next.seq))) next = t;
    }
    return next;
  }

  #fire(timer: ManualTimer): void {
    this.#timers.delete(timer);
    this.#now = Math.max(this.#now, timer.at);
    timer.fn();
  }
}

function flush(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
