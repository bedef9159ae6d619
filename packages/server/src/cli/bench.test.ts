import { describe, expect, it } from 'vitest';
import { grpcAuthority, quantile } from './bench.js';
import { CliError } from './client.js';

describe('grpcAuthority', () => {
  it('takes HOST:PORT: a name, an IPv4 address or a bracketed IPv6 one', () => {
    expect(grpcAuthority('127.0.0.1:8081')).toBe('http://127.0.0.1:8081');
    expect(grpcAuthority('[::1]:8081')).toBe('http://[::1]:8081');
    expect(grpcAuthority('sluice.internal:443')).toBe('http://sluice.internal:443');
  });

  it('refuses anything else as a usage error', () => {
    for (const target of ['localhost', '127.0.0.1', 'h:1/path', 'h:1?x', 'user@h:1', 'http://h:1', '::1:8081', '', 'h:']) {
      let thrown: unknown;
      try {
        grpcAuthority(target);
      } catch (err) {
        thrown = err;
      }
      expect(thrown, target).toBeInstanceOf(CliError);
      expect((thrown as CliError).exitCode, target).toBe(2);
    }
  });
});

describe('quantile', () => {
  it('is the smallest value with at least q of the values at or below it', () => {
    const sorted = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
    expect(quantile(sorted, 0.5)).toBe(5);
    expect(quantile(sorted, 0.99)).toBe(10);
    expect(quantile([], 0.5)).toBe(0);
  });
});
