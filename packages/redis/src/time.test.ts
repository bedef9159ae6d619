import { describe, expect, it } from 'vitest';
import { isSluiceError } from '@sluice/core';
import { parseRedisTime } from './time.js';

describe('parseRedisTime', () => {
  it('reads seconds and microseconds, as strings or numbers, in ms', () => {
    expect(parseRedisTime(['1780000000', '250500'])).toBe(1_780_000_000_250.5);
    expect(parseRedisTime([1780000000, 0])).toBe(1_780_000_000_000);
  });

  it('refuses anything else as a protocol fault', () => {
    for (const reply of [null, 'x', ['1'], ['1', '1000000'], ['-1', '0'], ['1.5', '0'], ['a', 'b']]) {
      let error: unknown;
      try {
        parseRedisTime(reply);
      } catch (err) {
        error = err;
      }
      expect(isSluiceError(error, 'SLUICE_ERR_STORE_PROTOCOL')).toBe(true);
    }
  });
});
