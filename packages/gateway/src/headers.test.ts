import type { Decision } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { blockHeaders, limiterHeaders, sfString, toSeconds } from './headers.js';

function decision(overrides: Partial<Decision>): Decision {
  return {
    allowed: true,
    limit: 100,
    remaining: 42,
    retryAfterMs: 0,
    resetAfterMs: 2500,
    reason: 'allowed',
    limitId: 'l0',
    statuses: [],
    ...overrides,
  };
}

describe('headers', () => {
  it('rounds seconds up, with a floor', () => {
    expect(toSeconds(0)).toBe(0);
    expect(toSeconds(0, 1)).toBe(1);
    expect(toSeconds(1)).toBe(1);
    expect(toSeconds(1000)).toBe(1);
    expect(toSeconds(1001)).toBe(2);
    expect(toSeconds(-5, 1)).toBe(1);
  });

  it('writes policy names as Structured Field strings', () => {
    expect(sfString('login-failures')).toBe('"login-failures"');
    expect(sfString('a"b\\c')).toBe('"a\\"b\\\\c"');
    expect(sfString('règle\n')).toBe('"r_gle_"');
    expect(sfString('x'.repeat(100))).toBe(`"${'x'.repeat(64)}"`);
  });

  it('advertises a governance block with Retry-After and the same reset', () => {
    expect(blockHeaders('r1', 3, undefined)).toEqual({
      'retry-after': '3',
      'ratelimit-policy': '"r1";q=0;w=3',
      ratelimit: '"r1";r=0;t=3',
    });
    expect(blockHeaders('r1', 3, { quota: 100, windowSeconds: 60 })['ratelimit-policy']).toBe('"r1";q=100;w=60');
  });

  it('advertises an exact limiter decision', () => {
    expect(limiterHeaders('api', decision({}))).toEqual({ 'ratelimit-policy': '"api";q=100', ratelimit: '"api";r=42;t=3' });
    expect(limiterHeaders('api', decision({ allowed: false, remaining: 0, retryAfterMs: 1200, reason: 'rate_limited' }))).toEqual(
      {
        'ratelimit-policy': '"api";q=100',
        ratelimit: '"api";r=0;t=2',
        'retry-after': '2',
      },
    );
  });

  it("sends the earlier drafts' fields instead, or both, when asked", () => {
    expect(limiterHeaders('api', decision({}), 'legacy')).toEqual({
      'ratelimit-limit': '100',
      'ratelimit-remaining': '42',
      'ratelimit-reset': '3',
    });
    const denied = decision({ allowed: false, remaining: 0, retryAfterMs: 1200, reason: 'rate_limited' });
    expect(limiterHeaders('api', denied, 'both')).toEqual({
      'ratelimit-policy': '"api";q=100',
      ratelimit: '"api";r=0;t=2',
      'ratelimit-limit': '100',
      'ratelimit-remaining': '0',
      'ratelimit-reset': '2',
      'retry-after': '2',
    });
    expect(blockHeaders('r1', 3, { quota: 100, windowSeconds: 60 }, 'legacy')).toEqual({
      'ratelimit-limit': '100',
      'ratelimit-remaining': '0',
      'ratelimit-reset': '3',
      'retry-after': '3',
    });
  });
});
