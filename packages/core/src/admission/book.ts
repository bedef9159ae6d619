/**
 * Deferred admission on a limiter's resources (`Limiter.book`, `claim`, `cancel`): bookings are
 * made and claimed in the store; a call that cannot be booked (see `ResourcePaths.bookable`) is
 * decided as `try` decides it.
 */
import type { OutcomeRecorders } from '../breakers/outcome-recorders.js';
import { fallbackDecision } from '../failover/failover-state.js';
import type { Failover } from '../failover/failover.js';
import { filterKey, type Prefilter } from '../local/prefilter.js';
import { combineStatuses, type Decision } from '../shared/decision.js';
import { checkBookingId, checkBookingToken, newBookingToken } from '../store/booking.js';
import type { Decider } from './decide.js';
import { bookable, breakerDecision, info, nothingToClaim, type Call } from './limiter-calls.js';
import type { BookOptions } from './rate-limiter.js';
import type { Waiting } from './wait-queue.js';

/** What {@link Bookings} books with: the limiter's store guard, decision path and local state. */
export interface BookingParts {
  readonly failover: Failover;
  readonly decider: Decider;
  readonly outcomes: OutcomeRecorders;
  readonly prefilter: Prefilter;
  readonly waiting: Waiting;
}

/** The booking verbs of one limiter. */
export class Bookings {
  readonly #parts: BookingParts;

  constructor(parts: BookingParts) {
    this.#parts = parts;
  }

  /**
   * Books (`create`) or claims a booking for a validated call started at `startedAt` (see
   * `Decider.start`); `plain` decides the call as `try` does, for a booking that cannot be made.
   */
  async book(
    call: Call,
    options: BookOptions,
    create: boolean,
    plain: () => Promise<Decision>,
    startedAt: number,
  ): Promise<Decision> {
    const { failover, decider, outcomes } = this.#parts;
    const id = checkBookingId(options.id, 'id');
    // A booking made without a token gets a fresh one, answered to its maker alone. A claim
    // without one can only find nothing (or be refused, if the id is held).
    const token = options.token !== undefined ? checkBookingToken(options.token) : create ? newBookingToken() : '';
    const r = call.resource;
    const resource = r.name;
    const asPlain = (d: Decision): Decision => ({ ...d, booking: info(d.allowed ? 'admitted' : 'denied', id) });
    if (!bookable(r, call.tenant, call.tier.coreShare)) {
      // Nothing of it can have been booked: a claim finds nothing, a booking is a plain call
      // (counted for hot keys by `try`).
      if (!create) return decider.observe(resource, 'book', nothingToClaim(r.limits, id), call.tier, startedAt);
      return asPlain(await plain());
    }
    decider.noteHot(call);
    if (r.breaker !== undefined) {
      const pass = r.breaker.tryPass();
      if (!pass.allowed)
        return decider.observe(resource, 'book', asPlain(breakerDecision(r.limits, pass.retryAfterMs)), call.tier, startedAt);
    }
    const fleet = r.fleetBreaker === undefined ? undefined : await outcomes.of(r)?.admit();
    if (fleet?.allowed === false) {
      return decider.observe(resource, 'book', asPlain(breakerDecision(r.limits, fleet.retryAfterMs)), call.tier, startedAt);
    }
    const result = await failover.book(
      { key: call.key, limits: call.limits, cost: call.cost, id, token, create, bounds: r.booking },
      r.onStoreFailure,
    );
    let decision = combineStatuses(result.statuses);
    let booking = info(result.outcome, id);
    const span = result.booking;
    if (result.outcome === 'booked' && span !== undefined) {
      const startsInMs = Math.max(1, Math.ceil(span.start - result.now));
      booking = { ...booking, startsInMs, expiresInMs: Math.max(0, Math.floor(span.end - result.now)), token };
      decision = { ...decision, allowed: false, reason: 'rate_limited', retryAfterMs: startsInMs };
    } else if (result.outcome === 'claimed' && span !== undefined) {
      booking = { ...booking, expiresInMs: Math.max(0, Math.floor(span.end - result.now)) };
      decision = { ...decision, allowed: true, reason: 'allowed', retryAfterMs: 0 };
    } else if (result.outcome === 'missing') {
      decision = { ...decision, allowed: false, reason: 'rate_limited', retryAfterMs: 0 };
    }
    if (result.fallback === true) decision = fallbackDecision(decision, result.unavailable === true);
    return decider.observe(resource, 'book', { ...decision, booking }, call.tier, startedAt);
  }

  /** Cancels a booking of a validated call (of cost 0); false when none was held. */
  async cancel(call: Call, options: { id: unknown; token?: unknown }): Promise<boolean> {
    const id = checkBookingId(options.id, 'id');
    // No token names no booking: a held one is refused by the store, as a wrong token is.
    const token = options.token === undefined ? '' : checkBookingToken(options.token);
    if (!call.resource.paths.bookable) return false;
    const found = await this.#parts.failover.cancel({ key: call.key, limits: call.limits, id, token });
    if (found) {
      this.#parts.prefilter.forget(filterKey(call.key, false));
      this.#parts.waiting.wake(call.key);
    }
    return found;
  }
}
