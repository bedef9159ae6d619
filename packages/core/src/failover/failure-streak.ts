/**
 * Counts consecutive failed calls, where calls that were in flight together count once: a
 * single stall of the store fails every call in flight at that moment, and that is one event,
 * not hundreds. A failure counts only if its call began after the last counted failure was
 * seen; any success ends the streak.
 *
 * @example
 * const streak = new FailureStreak(3);
 * const ticket = streak.begin();
 * try { await call(); streak.succeeded(); } catch { if (streak.failed(ticket)) switchToFallback(); }
 */
export class FailureStreak {
  readonly threshold: number;
  #issued = 0;
  /** Tickets up to this one belong to the wave of the last counted failure. */
  #boundary = 0;
  #count = 0;

  constructor(threshold: number) {
    this.threshold = threshold;
  }

  /** Consecutive failures counted so far. */
  get count(): number {
    return this.#count;
  }

  /** Call before each call; pass the ticket to {@link failed}. */
  begin(): number {
    return ++this.#issued;
  }

  /** A call ended well: the streak is over. */
  succeeded(): void {
    this.#count = 0;
  }

  /** A call failed; true when this failure completes a streak of `threshold`. */
  failed(ticket: number): boolean {
    if (ticket <= this.#boundary) return false;
    this.#boundary = this.#issued;
    this.#count++;
    return this.#count === this.threshold;
  }

  /** Starts over (after a switch to the fallback and back). */
  reset(): void {
    this.#count = 0;
    this.#boundary = this.#issued;
  }
}
