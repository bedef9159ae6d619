import { OldestFirst } from '@sluice/core';

/** Most client ids remembered; beyond it the oldest are forgotten (the count saturates). */
export const MAX_TRACKED_CLIENTS = 10_000;

/** Client ids: what `sluice-client-id` may carry (anything else is ignored, not refused). */
const CLIENT_ID = /^[A-Za-z0-9_.:-]{1,64}$/;

/**
 * Distinct remote clients seen in a sliding window, from their `sluice-client-id` header. Remote
 * clients divide limits by this count for their fair share while the service is unavailable.
 * Bounded: at most {@link MAX_TRACKED_CLIENTS} ids.
 */
export class ClientCounter {
  /** id -> last seen (ms); Map order is least recently seen first. */
  readonly #seen = new Map<string, number>();
  /** The least recently seen id in O(1) amortised (ids move to the back when seen again). */
  readonly #oldest = new OldestFirst(this.#seen);

  constructor(
    private readonly windowMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Notes a request of `id` (a header value; malformed ids are ignored). */
  note(id: unknown): void {
    if (typeof id !== 'string' || !CLIENT_ID.test(id)) return;
    this.#seen.delete(id);
    this.#seen.set(id, this.now());
    if (this.#seen.size > MAX_TRACKED_CLIENTS) this.#oldest.shift();
  }

  /** Distinct ids seen within the window. */
  count(): number {
    const cutoff = this.now() - this.windowMs;
    for (let e = this.#oldest.peek(); e !== undefined && e[1] < cutoff; e = this.#oldest.peek()) this.#oldest.shift();
    return this.#seen.size;
  }
}
