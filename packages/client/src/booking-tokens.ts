import { checkBookingToken, newBookingToken, type Decision } from '@sluice/core';

/** Most bookings whose tokens one client remembers; past it the oldest is forgotten. */
export const MAX_REMEMBERED_TOKENS = 10_000;

/**
 * The tokens of the bookings this process made, so that `book`, `claim` and `cancel` under an id
 * keep working without the caller carrying the token (the service refuses a held booking's id
 * without it). A booking call without a token is given a fresh one here, before it is sent: a
 * reply lost on the way still leaves the token to claim with. Bounded; an entry lasts until the
 * booking is used, cancelled or found missing, or its span has ended.
 */
export class BookingTokens {
  readonly #tokens = new Map<string, { readonly token: string; until: number }>();
  readonly #now: () => number;

  constructor(now: () => number = () => performance.now()) {
    this.#now = now;
  }

  /** The token a call sends: the caller's, the one remembered, or (to book) a fresh one. */
  tokenFor(resource: string, key: string, id: string, given: unknown, create: boolean): string | undefined {
    if (given !== undefined) return checkBookingToken(given);
    const name = refName(resource, key, id);
    const held = this.#tokens.get(name);
    if (held !== undefined && held.until > this.#now()) return held.token;
    if (!create) return undefined;
    const token = newBookingToken();
    // Kept until the answer says what came of it (a booking's span is at most about an hour).
    this.#remember(name, token, this.#now() + 3_600_000 + 60_000);
    return token;
  }

  /** Notes what a booking call came to. */
  settle(resource: string, key: string, id: string, token: string | undefined, d: Decision): void {
    const name = refName(resource, key, id);
    if (token !== undefined && d.booking?.outcome === 'booked') this.#remember(name, token, this.#now() + d.booking.expiresInMs);
    else if (d.booking !== undefined && d.booking.outcome !== 'booked') this.#tokens.delete(name);
  }

  /** A booking cancelled (or found not held): its token is no longer needed. */
  forget(resource: string, key: string, id: string): void {
    this.#tokens.delete(refName(resource, key, id));
  }

  /** How many tokens are remembered. */
  get size(): number {
    return this.#tokens.size;
  }

  #remember(name: string, token: string, until: number): void {
    this.#tokens.delete(name);
    if (this.#tokens.size >= MAX_REMEMBERED_TOKENS) this.#tokens.delete(this.#tokens.keys().next().value!);
    this.#tokens.set(name, { token, until });
  }
}

function refName(resource: string, key: string, id: string): string {
  return JSON.stringify([resource, key, id]);
}
