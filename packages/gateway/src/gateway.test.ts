import type { IncomingMessage, ServerResponse } from 'node:http';
import { Limiter, isSluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { Gateway, settle, type Rejection, type RouteOptions } from './gateway.js';

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

describe('a route limit key', () => {
  const request = (headers: Record<string, string>) => ({ url: '/login', headers, socket: {} }) as unknown as IncomingMessage;
  const response = () => ({ headersSent: false, setHeader: () => undefined }) as unknown as ServerResponse;

  it('reads the key from a header selector, as the dimensions do, and limits each key apart', async () => {
    const limiter = new Limiter({ resources: { login: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 } } });
    const gateway = new Gateway({ dimensions: { ip: false } });
    try {
      const route = gateway.route({ limit: { limiter, resource: 'login', key: { header: 'X-Tenant' } } });
      const status = async (tenant?: string) =>
        (await gateway.evaluate(request(tenant === undefined ? {} : { 'x-tenant': tenant }), response(), route))?.status ?? 200;
      const seen = [];
      for (const tenant of ['acme', 'acme', 'globex', undefined, undefined]) seen.push(await status(tenant));
      expect(seen).toEqual([200, 429, 200, 200, 429]);
    } finally {
      await gateway.close();
      await limiter.close();
    }
  });

  it('refuses a header form it does not know', () => {
    expect(() => new Gateway({ headers: 'rfc' as never })).toThrow(
      expect.objectContaining({ code: 'SLUICE_ERR_INVALID_OPTIONS', field: 'headers' }),
    );
  });

  it('rejects a key selector that is neither a header nor a function', async () => {
    const limiter = new Limiter({ resources: { login: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 } } });
    const gateway = new Gateway();
    try {
      for (const key of ['x-tenant', { header: '' }, { cookie: 'sid' }]) {
        const route = { limit: { limiter, resource: 'login', key } } as unknown as RouteOptions;
        expect(() => gateway.route(route)).toThrowError(/route\.limit\.key/);
        try {
          gateway.route(route);
        } catch (err) {
          expect(isSluiceError(err, 'SLUICE_ERR_INVALID_OPTIONS')).toBe(true);
        }
      }
    } finally {
      await gateway.close();
      await limiter.close();
    }
  });
});
