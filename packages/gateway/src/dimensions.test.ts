import type { IncomingMessage } from 'node:http';
import { isSluiceError } from '@sluice/core';
import { hashValue } from '@sluice/stream';
import { describe, expect, it } from 'vitest';
import { compileDimensions, compileSelector, firstSegment, hashBounded, urlPath, type DimensionOptions } from './dimensions.js';

function req(url: string, headers: Record<string, string | string[]> = {}, remoteAddress = '10.0.0.1'): IncomingMessage {
  return { url, headers, socket: { remoteAddress } } as unknown as IncomingMessage;
}

describe('dimensions', () => {
  it('reads the path without the query, and the first segment', () => {
    expect(urlPath(req('/orders/42?x=1'))).toBe('/orders/42');
    expect(urlPath({ url: '/42', originalUrl: '/orders/42', headers: {} } as unknown as IncomingMessage)).toBe('/orders/42');
    expect(firstSegment('/orders/42')).toBe('/orders');
    expect(firstSegment('/orders')).toBe('/orders');
    expect(firstSegment('/')).toBe('/');
    expect(firstSegment('')).toBe('/');
  });

  it('cuts values before hashing', () => {
    const long = 'a'.repeat(10_000);
    expect(hashBounded(long, 256)).toBe(hashValue('a'.repeat(256)));
    expect(hashBounded(long + 'b', 256)).toBe(hashBounded(long, 256));
    expect(hashBounded(undefined, 256)).toBe(0);
    expect(hashBounded('', 256)).toBe(0);
  });

  it('reads headers (first of repeated ones), functions and the peer address', () => {
    const d = compileDimensions({ user: { header: 'X-User' }, tenant: (r) => r.headers['x-tenant'] as string });
    const r = req('/', { 'x-user': ['alice', 'bob'], 'x-tenant': 't1' });
    expect(d.user?.(r)).toBe('alice');
    expect(d.tenant?.(r)).toBe('t1');
    expect(d.ip?.(r)).toBe('10.0.0.1');
    expect(compileDimensions({ ip: false }).ip).toBeUndefined();
    expect(compileDimensions({ resource: 'api' }).resourceName).toBe('api');
  });

  it('rejects malformed options', () => {
    const bad: DimensionOptions[] = [
      { resource: '' },
      { path: true as unknown as false },
      { user: { header: '' } },
      { tenant: 'x-tenant' as unknown as { header: string } },
      { ip: 'yes' as unknown as boolean },
    ];
    for (const b of bad) {
      try {
        compileDimensions(b);
        expect.unreachable();
      } catch (err) {
        expect(isSluiceError(err, 'SLUICE_ERR_INVALID_OPTIONS')).toBe(true);
      }
    }
  });

  it('compiles a value selector: a header (any case, first of repeated ones) or a function', () => {
    const r = req('/', { 'x-tenant': ['acme', 'other'], 'x-user': 'alice' });
    expect(compileSelector({ header: 'X-Tenant' }, 'f')?.(r)).toBe('acme');
    expect(compileSelector({ header: 'x-missing' }, 'f')?.(r)).toBeUndefined();
    expect(compileSelector((q) => q.headers['x-user'] as string, 'f')?.(r)).toBe('alice');
    expect(compileSelector(undefined, 'f')).toBeUndefined();
  });

  it('rejects a malformed value selector, naming the option', () => {
    const bad: unknown[] = ['x-tenant', { header: '' }, { header: 7 }, { cookie: 'sid' }, null, 42];
    for (const b of bad) {
      try {
        compileSelector(b as { header: string }, 'route.limit.key');
        expect.unreachable();
      } catch (err) {
        expect(isSluiceError(err, 'SLUICE_ERR_INVALID_OPTIONS')).toBe(true);
        expect((err as Error).message).toContain('route.limit.key');
      }
    }
  });
});
