import { describe, expect, it } from 'vitest';
import { ErrorCodes, SluiceError } from '@sluice/core';
import { INVALID_REQUEST_FAILURE, invalidRequestFailure } from './failures.js';

describe('invalidRequestFailure', () => {
  it('names the resource and the error code, with the limiter error as cause, and is never retried', () => {
    const err = new SluiceError(ErrorCodes.INVALID_KEY, 'key: too long');
    const f = invalidRequestFailure('api:a', err);
    expect(f).toMatchObject({
      type: INVALID_REQUEST_FAILURE,
      message: 'invalid permit request for api:a: key: too long',
      nonRetryable: true,
      details: [{ resource: 'api:a', code: ErrorCodes.INVALID_KEY }],
    });
    expect(f.cause).toBe(err);
  });

  it('without a resource, carries the reason alone', () => {
    const err = new SluiceError(ErrorCodes.UNKNOWN_RESOURCE, 'no resource "x"');
    const f = invalidRequestFailure(undefined, err);
    expect(f).toMatchObject({ type: INVALID_REQUEST_FAILURE, message: 'no resource "x"', nonRetryable: true });
    expect(f.details).toBeUndefined();
    expect(f.cause).toBe(err);
    const said = invalidRequestFailure(undefined, 'a permit request needs a resource');
    expect(said).toMatchObject({ message: 'a permit request needs a resource', nonRetryable: true });
    expect(said.cause).toBeUndefined();
  });
});
