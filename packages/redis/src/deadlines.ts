/**
 * Timeouts for many calls on one timer. Each call registers its deadline; one timer is armed for
 * the earliest and re-armed only when a call needs an earlier one, so a call that settles in time
 * costs no timer of its own. (A timer armed and cleared per call, with a duration that adapts
 * from call to call, cost a lone caller about as much CPU as the rest of its decision.)
 *
 * The pending deadlines form a linked list through the deadlines themselves: adding and
 * cancelling allocate nothing beyond the deadline (a Set that a lone caller fills and empties
 * call after call reallocates its table each time it empties).
 */
export class Deadlines {
  /** The pending deadlines, newest first. */
  #head: Deadline | undefined;
  #size = 0;
  #timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires (performance.now() ms); Infinity when none is armed. */
  #armedFor = Infinity;

  /** Calls `fire` once `delayMs` from now unless {@link cancel} is called with the deadline first. */
  add(delayMs: number, fire: () => void): Deadline {
    const deadline: Deadline = { at: performance.now() + delayMs, fire, prev: undefined, next: this.#head };
    if (this.#head) this.#head.prev = deadline;
    this.#head = deadline;
    this.#size++;
    if (deadline.at < this.#armedFor) this.#arm(deadline.at);
    // A pending deadline keeps the process alive, as a timer of its own would.
    else if (this.#size === 1) this.#timer?.ref();
    return deadline;
  }

  /** Drops a deadline not yet fired; does nothing for one fired or dropped already. */
  cancel(deadline: Deadline): void {
    if (deadline.fire === undefined) return;
    // A settled call's deadline must not hold the call: its callback reaches the call's promise
    // and its caller's continuation. Kept, they outlived the call: at 64 calls in flight on many
    // keys about 1.2 MB survived each young-generation GC (85 KB with the callback dropped),
    // those GCs took 3 ms instead of 0.8, and the calls in flight during them made the p99.
    deadline.fire = undefined;
    // Not in the list when it is due and waiting in #expire for its turn to fire.
    if (deadline.prev !== undefined || this.#head === deadline) this.#unlink(deadline);
    // The timer stays armed (arming costs more than a spare wake-up) but holds nothing up.
    if (this.#size === 0) this.#timer?.unref();
  }

  /** Drops every deadline without firing it, and the timer. */
  clear(): void {
    for (let d = this.#head; d; d = d.next) d.fire = undefined;
    this.#head = undefined;
    this.#size = 0;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedFor = Infinity;
  }

  #unlink(d: Deadline): void {
    if (d.prev) d.prev.next = d.next;
    else this.#head = d.next;
    if (d.next) d.next.prev = d.prev;
    d.prev = d.next = undefined;
    this.#size--;
  }

  #arm(at: number): void {
    clearTimeout(this.#timer);
    this.#armedFor = at;
    this.#timer = setTimeout(this.#expire, Math.max(0, at - performance.now()));
  }

  readonly #expire = (): void => {
    this.#timer = undefined;
    this.#armedFor = Infinity;
    const now = performance.now();
    const due: Deadline[] = [];
    let next = Infinity;
    for (let d = this.#head, after = d?.next; d; d = after, after = d?.next) {
      if (d.at <= now) {
        due.push(d);
        this.#unlink(d);
      } else {
        next = Math.min(next, d.at);
      }
    }
    // Timers have whole-ms resolution and may fire a little before a deadline: arm again.
    if (next !== Infinity) this.#arm(next);
    // Oldest first, once the list is settled: a callback may add deadlines, or cancel one that
    // is due after it (which then does not fire).
    for (let i = due.length - 1; i >= 0; i--) {
      const fire = due[i]!.fire;
      due[i]!.fire = undefined;
      fire?.();
    }
  };
}

/** A deadline {@link Deadlines.add} registered: the handle {@link Deadlines.cancel} takes. */
export interface Deadline {
  readonly at: number;
  /** Dropped when the deadline fires or is cancelled. */
  fire: (() => void) | undefined;
  prev: Deadline | undefined;
  next: Deadline | undefined;
}
