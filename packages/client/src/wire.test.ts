import { ErrorCodes, SluiceError, isSluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { Overloaded } from './batcher.js';
import { ClosedByCaller, errorFromBody, isUnavailable } from './transport.js';
import { decisionFromBody, viewFromBody } from './wire.js';

describe('decoding the service', () => {
  it('keeps the service code of a 4xx answer and maps faults of the service to unavailable', () => {
    const e = errorFromBody({ error: { code: 'SLUICE_ERR_BATCH_TOO_LARGE', message: 'items: at most 5', field: 'items' } }, 413);
    expect([e.code, e.field, e.message]).toEqual(['SLUICE_ERR_BATCH_TOO_LARGE', 'items', 'items: at most 5']);
    expect(isUnavailable(e)).toBe(false);
    expect(errorFromBody('<html>', 502).code).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect(errorFromBody({}, 400).code).toBe(ErrorCodes.STORE_PROTOCOL);
    expect(isUnavailable(errorFromBody({ error: { code: 'SLUICE_ERR_SHUTTING_DOWN', message: 'bye' } }, 503))).toBe(true);
    expect(isUnavailable(new SluiceError(ErrorCodes.STORE_TIMEOUT, 'slow'))).toBe(true);
    expect(isUnavailable(new Overloaded(5))).toBe(true);
    expect(isUnavailable(new ClosedByCaller())).toBe(false);
    expect(isUnavailable(new Error('x'))).toBe(false);
  });

  it('refuses malformed decisions as protocol faults', () => {
    for (const body of [null, [], { allowed: 'yes' }, { allowed: true, limit: 1, remaining: 0 }]) {
      expect(() => decisionFromBody(body)).toThrow(SluiceError);
      try {
        decisionFromBody(body);
      } catch (e) {
        expect(isSluiceError(e, 'SLUICE_ERR_STORE_PROTOCOL')).toBe(true);
      }
    }
    const d = decisionFromBody({
      allowed: false,
      limit: 5,
      remaining: 0,
      retryAfterMs: 10,
      resetAfterMs: 20,
      reason: 'rate_limited',
      limitId: '0',
      source: 'prefilter',
    });
    expect(d).toMatchObject({ allowed: false, source: 'prefilter', statuses: [] });
    expect(d.permitId).toBeUndefined();
    expect(d.booking).toBeUndefined();
  });

  it("reads a decision's permitId, or the leaseId of a server from before the rename", () => {
    const base = { allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 0, reason: 'allowed', limitId: '0' };
    expect(decisionFromBody({ ...base, permitId: 'p1', leaseId: 'p1' })).toMatchObject({ permitId: 'p1', leaseId: 'p1' });
    expect(decisionFromBody({ ...base, permitId: 'p2' })).toMatchObject({ permitId: 'p2', leaseId: 'p2' });
    expect(decisionFromBody({ ...base, leaseId: 'old' })).toMatchObject({ permitId: 'old', leaseId: 'old' });
  });

  it("decodes a decision's booking, and refuses a malformed one", () => {
    const base = {
      allowed: false,
      limit: 5,
      remaining: 0,
      retryAfterMs: 900,
      resetAfterMs: 900,
      reason: 'rate_limited',
      limitId: '0',
    };
    const booking = { outcome: 'booked', id: 'job-1', startsInMs: 900, expiresInMs: 1900 };
    expect(decisionFromBody({ ...base, booking }).booking).toEqual(booking);
    for (const bad of [
      null,
      'booked',
      { ...booking, outcome: 'maybe' },
      { ...booking, id: 3 },
      { ...booking, startsInMs: '1' },
      { outcome: 'booked', id: 'x' },
    ]) {
      expect(() => decisionFromBody({ ...base, booking: bad }), JSON.stringify(bad)).toThrow(/malformed booking/);
    }
  });

  it('leaves out resources the client cannot compile, keeping the rest', () => {
    const warned: string[] = [];
    const view = viewFromBody(
      {
        version: 3,
        clients: 4.7,
        resources: {
          good: { limits: [{ id: '0', algorithm: 'gcra', limit: 10, windowMs: 1000, burst: 10 }], onStoreFailure: 'closed' },
          bad: { limits: [{ algorithm: 'nope', limit: 1 }] },
          'bad|name': { limits: [{ algorithm: 'gcra', limit: 1 }] },
          notalist: { limits: 5 },
        },
      },
      { info: () => undefined, warn: (_o, m) => warned.push(m) },
    );
    expect([...view.resources.keys()]).toEqual(['good']);
    expect(view.resources.get('good')!.compiled.onStoreFailure).toBe('closed');
    expect(view.clients).toBe(4);
    expect(warned).toHaveLength(2);
    expect(() => viewFromBody({ resources: {} })).toThrow(/malformed/);
  });
});
