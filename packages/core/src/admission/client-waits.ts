import type { Waiter, WaitQueue } from './wait-queue.js';

/** Where one wait is queued: its queue and the (key, kind) the queue is filed under. */
export interface WaitPlace {
  readonly queue: WaitQueue;
  readonly key: string;
  readonly kind: string;
}

/**
 * The waits of each named client, in arrival order, with where each is queued: their count
 * bounds a client's waits (`maxWaitersPerClient`), and when every waiting key is taken
 * (`maxWaitingKeys`) they say which waits to turn away so that a client holding few gets a key of
 * its own. Without that, a few clients holding their bound each fill the table for everyone.
 */
export class ClientWaits {
  readonly #of = new Map<string, Map<Waiter, WaitPlace>>();

  /** How many waits `client` has queued. */
  count(client: string): number {
    return this.#of.get(client)?.size ?? 0;
  }

  /** Files a new wait of `client` (unnamed callers, '', are not tracked). */
  add(client: string, w: Waiter, place: WaitPlace): void {
    if (client === '') return;
    let waits = this.#of.get(client);
    if (waits === undefined) this.#of.set(client, (waits = new Map<Waiter, WaitPlace>()));
    waits.set(w, place);
  }

  /** Forgets a wait that ended. */
  delete(client: string, w: Waiter): void {
    const waits = this.#of.get(client);
    if (waits === undefined) return;
    waits.delete(w);
    if (waits.size === 0) this.#of.delete(client);
  }

  /**
   * The queue to empty so that `client` may open a queue of its own in a full table: the newest
   * queue that only the client holding the most waits waits in, when that client holds at least
   * two more waits than `client` (so turning its waits away never leaves it with fewer). Undefined
   * when the table is already fair to `client`: then the newcomer is the one turned away.
   */
  roomFor(client: string): WaitPlace | undefined {
    let most: string | undefined;
    let held = 0;
    for (const [c, waits] of this.#of) {
      if (waits.size > held) {
        most = c;
        held = waits.size;
      }
    }
    if (most === undefined || most === client || held < this.count(client) + 2) return undefined;
    // Newest first: a client's latest waits are the ones beyond its fair share.
    const places = [...this.#of.get(most)!.values()];
    for (let i = places.length - 1; i >= 0; i--) {
      const place = places[i]!;
      if (place.queue.size === place.queue.countOf(most)) return place;
    }
    return undefined;
  }
}
