import type { Decision } from '@sluice/core';
import { ServerError, ServerErrorCodes } from '../errors.js';

/** Bounds of {@link BookingClients}. */
export interface BookingClientBounds {
  /** Most live bookings one client may hold. */
  readonly perClient: number;
  /** Most clients with live bookings tracked at once. */
  readonly clients: number;
}

/**
 * Live bookings per client (the caller's address, as the waits count clients), so that one
 * client cannot hold more than `perClient` of them however many keys and requests it spreads
 * them over. A booking counts from the answer that made it (`booked`) until its span ends, it is
 * claimed or cancelled; the store's clock is not needed: the span's end is taken from the
 * answer's `expiresInMs` on this process's clock, so a booking is never forgotten early.
 *
 * Memory is bounded: at most `clients` clients of at most `perClient` bookings. A client whose
 * bookings have all ended is dropped when touched, and all of them when the table is full.
 */
export class BookingClients {
  readonly #bounds: BookingClientBounds;
  readonly #now: () => number;
  /** By client: booking (resource, key, id) -> when it ends (ms, this process's clock). */
  readonly #clients = new Map<string, Map<string, number>>();

  constructor(bounds: BookingClientBounds, now: () => number = () => performance.now()) {
    this.#bounds = bounds;
    this.#now = now;
  }

  /**
   * Refuses (`SLUICE_ERR_BOOKING_LIMIT`) a call that could make a booking for `client` when it
   * holds `perClient` live ones already (a call naming one it holds is let through: it cannot
   * add one), or when the table has no room for a new client. A call let through holds its place
   * until {@link settle} (or {@link forget}, if it failed) says what it came to, so the items of
   * one batch, decided together, cannot overshoot the bound. True when it took a new place
   * (which a failed call gives back with {@link forget}).
   */
  admit(client: string, ref: BookingRef): boolean {
    const now = this.#now();
    const name = refName(ref);
    let held = this.#clients.get(client);
    if (held !== undefined) {
      prune(held, now);
      if (held.has(name)) return false;
      if (held.size >= this.#bounds.perClient) {
        throw new ServerError(
          ServerErrorCodes.BOOKING_LIMIT,
          `this client holds ${held.size} live bookings, the most one client may (SLUICE_MAX_BOOKINGS_PER_CLIENT)`,
        );
      }
    } else {
      if (this.#clients.size >= this.#bounds.clients) {
        for (const [c, bookings] of this.#clients) {
          prune(bookings, now);
          if (bookings.size === 0) this.#clients.delete(c);
        }
      }
      if (this.#clients.size >= this.#bounds.clients) {
        throw new ServerError(
          ServerErrorCodes.BOOKING_LIMIT,
          `the server tracks bookings of ${this.#clients.size} clients, the most it may (SLUICE_MAX_BOOKING_CLIENTS)`,
        );
      }
      held = new Map();
      this.#clients.set(client, held);
    }
    held.set(name, now + PENDING_MS);
    return true;
  }

  /** Notes what a booking call came to: a booking held counts until its end, a used one no more. */
  settle(client: string, ref: BookingRef, d: Decision): void {
    const outcome = d.booking?.outcome;
    const held = this.#clients.get(client);
    if (outcome === 'booked' && held !== undefined) held.set(refName(ref), this.#now() + d.booking!.expiresInMs);
    else this.forget(client, ref);
  }

  /** A booking claimed, cancelled or found missing: no longer counted. */
  forget(client: string, ref: BookingRef): void {
    const held = this.#clients.get(client);
    if (held === undefined) return;
    held.delete(refName(ref));
    if (held.size === 0) this.#clients.delete(client);
  }

  /** Live bookings counted for `client` (for tests and metrics). */
  heldBy(client: string): number {
    const held = this.#clients.get(client);
    if (held === undefined) return 0;
    prune(held, this.#now());
    return held.size;
  }
}

/** How long a call let through holds its place at most before its answer settles it: the longest horizon and span. */
const PENDING_MS = 3_600_000 + 60_000;

/** What names a booking: its resource, key and id. */
export interface BookingRef {
  readonly resource: string;
  readonly key?: string | undefined;
  readonly id: string;
}

/** One string per booking: the parts JSON-encoded, so no two bookings share a name. */
function refName(ref: BookingRef): string {
  return JSON.stringify([ref.resource, ref.key ?? '', ref.id]);
}

function prune(held: Map<string, number>, now: number): void {
  for (const [name, end] of held) if (end <= now) held.delete(name);
}
