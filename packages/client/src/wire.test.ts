import { ErrorCodes, SluiceError } from '@sluice/core';
import { decodeError } from '@sluice/core/wire';
import { describe, expect, it } from 'vitest';
import { Overloaded } from './batcher.js';
import { ClosedByCaller, isUnavailable } from './transport.js';
import { viewFromBody } from './wire.js';

describe('decoding the service', () => {
  it('keeps the service code of a 4xx answer and maps faults of the service to unavailable', () => {
    const e = decodeError({ error: { code: 'SLUICE_ERR_BATCH_TOO_LARGE', message: 'items: at most 5', field: 'items' } }, 413);
    expect([e.code, e.field, e.message]).toEqual(['SLUICE_ERR_BATCH_TOO_LARGE', 'items', 'items: at most 5']);
    expect(isUnavailable(e)).toBe(false);
    expect(decodeError('<html>', 502).code).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect(decodeError({}, 400).code).toBe(ErrorCodes.STORE_PROTOCOL);
    expect(isUnavailable(decodeError({ error: { code: 'SLUICE_ERR_SHUTTING_DOWN', message: 'bye' } }, 503))).toBe(true);
    expect(isUnavailable(new SluiceError(ErrorCodes.STORE_TIMEOUT, 'slow'))).toBe(true);
    expect(isUnavailable(new Overloaded(5))).toBe(true);
    expect(isUnavailable(new ClosedByCaller())).toBe(false);
    expect(isUnavailable(new Error('x'))).toBe(false);
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
