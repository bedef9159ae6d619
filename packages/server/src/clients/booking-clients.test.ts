import type { Decision } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { BookingClients } from './booking-clients.js';

const answer = (outcome: 'booked' | 'claimed' | 'admitted', expiresInMs = 1000): Decision =>
  ({ allowed: outcome !== 'booked', booking: { outcome, id: 'x', startsInMs: 0, expiresInMs } }) as Decision;
const ref = (id: string) => ({ resource: 'api', key: 'k', id });
const refusal = { code: 'SLUICE_ERR_BOOKING_LIMIT' };

describe('live bookings per client', () => {
  it('refuses a client past its bound, lets a call naming a held booking through, and frees places', () => {
    let now = 0;
    const b = new BookingClients({ perClient: 2, clients: 10 }, () => now);
    for (const id of ['a', 'b']) {
      expect(b.admit('c1', ref(id))).toBe(true);
      b.settle('c1', ref(id), answer('booked'));
    }
    expect(() => b.admit('c1', ref('c'))).toThrow(expect.objectContaining(refusal));
    // Another client is apart; a held booking's id is let through, taking no new place.
    expect(b.admit('c2', ref('c'))).toBe(true);
    expect(b.admit('c1', ref('a'))).toBe(false);
    // Claimed: no longer counted. Expired: neither.
    b.settle('c1', ref('a'), answer('claimed'));
    expect(b.admit('c1', ref('c'))).toBe(true);
    b.settle('c1', ref('c'), answer('admitted'));
    now = 2000;
    expect(b.heldBy('c1')).toBe(0);
  });

  it('counts calls in flight, so a batch decided together cannot overshoot', () => {
    const b = new BookingClients({ perClient: 3, clients: 10 }, () => 0);
    const admitted = ['a', 'b', 'c', 'd', 'e'].map((id) => {
      try {
        return b.admit('c1', ref(id));
      } catch {
        return false;
      }
    });
    expect(admitted).toEqual([true, true, true, false, false]);
  });

  it('bounds the clients it tracks, dropping those whose bookings all ended', () => {
    let now = 0;
    const b = new BookingClients({ perClient: 5, clients: 2 }, () => now);
    for (const c of ['c1', 'c2']) {
      b.admit(c, ref('a'));
      b.settle(c, ref('a'), answer('booked', 100));
    }
    expect(() => b.admit('c3', ref('a'))).toThrow(expect.objectContaining(refusal));
    now = 200;
    expect(b.admit('c3', ref('a'))).toBe(true);
  });
});
