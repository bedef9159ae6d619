import { describe, expect, it } from 'vitest';
import { ErrorCodes, SluiceError } from './errors.js';
import { checkCost, checkKey, compileLimits, type LimitPolicy } from './policy.js';

function errorOf(fn: () => unknown): SluiceError {
  try {
    fn();
  } catch (e) {
    if (e instanceof SluiceError) return e;
    throw e;
  }
  throw new Error('expected a SluiceError');
}

describe('policy validation', () => {
  const cases: [string, unknown, string, string][] = [
    ['zero limit', { algorithm: 'gcra', limit: 0 }, 'limits[0].limit', 'between 1 and'],
    ['negative limit', { algorithm: 'token-bucket', limit: -5 }, 'limits[0].limit', 'between 1 and'],
    ['NaN limit', { algorithm: 'token-bucket', limit: NaN }, 'limits[0].limit', 'integer'],
    ['zero window', { algorithm: 'fixed-window', limit: 5, windowMs: 0 }, 'limits[0].windowMs', 'between 1 and'],
    ['burst below 1', { algorithm: 'token-bucket', limit: 5, burst: 0 }, 'limits[0].burst', 'between 1 and'],
    ['unknown algorithm', { algorithm: 'leaky', limit: 5 }, 'limits[0].algorithm', 'unknown algorithm "leaky"'],
    ['unknown field', { algorithm: 'gcra', limit: 5, rate: 3 }, 'limits[0].rate', 'unknown field'],
    ['zero slices', { algorithm: 'sliding-window', limit: 5, slices: 0 }, 'limits[0].slices', 'between 1 and'],
    ['huge log', { algorithm: 'sliding-log', limit: 1e6 }, 'limits[0].limit', 'between 1 and 10000'],
    ['short permit TTL', { algorithm: 'concurrency', limit: 5, permitTtlMs: 1 }, 'limits[0].permitTtlMs', 'between 10 and'],
  ];

  it.each(cases)('rejects %s naming the field', (_name, policy, field, message) => {
    const err = errorOf(() => compileLimits([policy as LimitPolicy]));
    expect(err.code).toBe(ErrorCodes.INVALID_POLICY);
    expect(err.field).toBe(field);
    expect(err.message).toContain(message);
  });

  it('rejects duplicate ids, empty lists and two concurrency limits', () => {
    expect(
      errorOf(() =>
        compileLimits([
          { algorithm: 'gcra', limit: 1, id: 'a' },
          { algorithm: 'gcra', limit: 2, id: 'a' },
        ]),
      ).field,
    ).toBe('limits[1].id');
    expect(errorOf(() => compileLimits([])).code).toBe(ErrorCodes.INVALID_POLICY);
    expect(
      errorOf(() =>
        compileLimits([
          { algorithm: 'concurrency', limit: 1 },
          { algorithm: 'concurrency', limit: 2 },
        ]),
      ).message,
    ).toContain('at most one concurrency limit');
  });

  it('fills defaults and names limits by position', () => {
    const [a, b] = compileLimits([
      { algorithm: 'fixed-window', limit: 100 },
      { algorithm: 'fixed-window', limit: 10_000, windowMs: 86_400_000 },
    ]);
    expect(a).toMatchObject({ id: '0', windowMs: 1000, burst: 100, slices: 10, permitTtlMs: 30_000 });
    expect(b!.id).toBe('1');
    expect(Object.isFrozen(a)).toBe(true);
  });
});

describe('costs and keys', () => {
  const limits = compileLimits({ algorithm: 'token-bucket', limit: 10, burst: 4 });

  it.each([NaN, -1, 1.5, '3', Infinity])('rejects cost %s', (cost) => {
    expect(errorOf(() => checkCost(cost, limits)).code).toBe(ErrorCodes.INVALID_COST);
  });

  it('rejects a cost no limit can ever admit', () => {
    const err = errorOf(() => checkCost(5, limits));
    expect(err.code).toBe(ErrorCodes.COST_EXCEEDS_LIMIT);
    expect(checkCost(4, limits)).toBe(4);
  });

  it('bounds key length', () => {
    expect(errorOf(() => checkKey('x'.repeat(257))).code).toBe(ErrorCodes.INVALID_KEY);
    expect(errorOf(() => checkKey(42)).code).toBe(ErrorCodes.INVALID_KEY);
    expect(checkKey('x'.repeat(256))).toHaveLength(256);
  });
});
