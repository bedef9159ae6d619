import { describe, expect, it } from 'vitest';
import { settle, type Rejection } from './gateway.js';

const REJECTION: Rejection = { status: 429, headers: { 'retry-after': '1' }, body: '{}' };

/** Runs `settle` and reports which way it went once it has. */
function outcome(verdict: Parameters<typeof settle>[0]): Promise<string> {
  return new Promise((resolve) =>
    settle(
      verdict,
      () => resolve('pass'),
      (r) => resolve(`refuse ${r.status}`),
    ),
  );
}

describe('settle', () => {
  it('passes or refuses at once for a synchronous verdict', () => {
    const seen: string[] = [];
    settle(
      undefined,
      () => seen.push('pass'),
      () => seen.push('refuse'),
    );
    settle(
      REJECTION,
      () => seen.push('pass'),
      () => seen.push('refuse'),
    );
    expect(seen).toEqual(['pass', 'refuse']);
  });

  it('waits for a limiter that needs a round trip, and lets the request go on when it fails', async () => {
    expect(await outcome(Promise.resolve(undefined))).toBe('pass');
    expect(await outcome(Promise.resolve(REJECTION))).toBe('refuse 429');
    expect(await outcome(Promise.reject(new Error('store down')))).toBe('pass');
  });
});
