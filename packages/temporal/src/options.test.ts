import { describe, expect, it } from 'vitest';
import { Limiter, SluiceError } from '@sluice/core';
import { compileActivityOptions, type SluiceActivityOptions } from './options.js';
import { ScriptedLimiter } from '../test/scripted-limiter.js';

function codeOf(fn: () => unknown): { code: string; message: string; field: string | undefined } {
  try {
    fn();
  } catch (err) {
    if (err instanceof SluiceError) return { code: err.code, message: err.message, field: err.field };
    throw err;
  }
  throw new Error('expected a SluiceError');
}

describe('compileActivityOptions (worker start)', () => {
  const limiter = new ScriptedLimiter(['api:a']);

  it('rejects a missing limiter with a typed error', () => {
    const e = codeOf(() => compileActivityOptions({ activities: {} } as unknown as SluiceActivityOptions));
    expect(e.code).toBe('SLUICE_ERR_INVALID_OPTIONS');
    expect(e.field).toBe('limiter');
  });

  it('rejects an object that is not a RateLimiter', () => {
    const e = codeOf(() => compileActivityOptions({ limiter: { try() {} } } as unknown as SluiceActivityOptions));
    expect(e.code).toBe('SLUICE_ERR_INVALID_OPTIONS');
  });

  it('names the activity mapped to an unknown resource', () => {
    const e = codeOf(() => compileActivityOptions({ limiter, activities: { chargeCard: { resource: 'api:payments' } } }));
    expect(e.code).toBe('SLUICE_ERR_UNKNOWN_RESOURCE');
    expect(e.message).toContain('"chargeCard"');
    expect(e.message).toContain('"api:payments"');
    expect(e.field).toBe('activities.chargeCard.resource');
  });

  it.each([0, -1, 1.5, 'two', Number.NaN])('names the activity with an invalid cost %s', (cost) => {
    const e = codeOf(() =>
      compileActivityOptions({ limiter, activities: { sync: { resource: 'api:a', cost: cost as number } } }),
    );
    expect(e.code).toBe('SLUICE_ERR_INVALID_COST');
    expect(e.message).toContain('"sync"');
    expect(e.field).toBe('activities.sync.cost');
  });

  it('rejects a cost the resource can never admit when the limiter exposes its limits', async () => {
    const real = new Limiter({ resources: { 'api:a': { algorithm: 'token-bucket', limit: 10 } } });
    const e = codeOf(() => compileActivityOptions({ limiter: real, activities: { bulk: [{ resource: 'api:a', cost: 11 }] } }));
    expect(e.code).toBe('SLUICE_ERR_COST_EXCEEDS_LIMIT');
    expect(e.message).toContain('"bulk"');
    expect(e.field).toBe('activities.bulk[0].cost');
    await real.close();
  });

  it('rejects unknown fields, bad modes and bad bounds', () => {
    expect(
      codeOf(() => compileActivityOptions({ limiter, activities: { a: { resource: 'api:a', rate: 1 } as never } })).field,
    ).toBe('activities.a.rate');
    expect(
      codeOf(() => compileActivityOptions({ limiter, activities: { a: { resource: 'api:a', mode: 'eager' as never } } })).code,
    ).toBe('SLUICE_ERR_INVALID_OPTIONS');
    expect(codeOf(() => compileActivityOptions({ limiter, maxWaitMs: -1 })).field).toBe('maxWaitMs');
    expect(codeOf(() => compileActivityOptions({ limiter, retryJitter: 2 })).field).toBe('retryJitter');
    expect(codeOf(() => compileActivityOptions({ limiter, activities: { a: [] } })).code).toBe('SLUICE_ERR_INVALID_OPTIONS');
  });

  it("refuses an empty key (leaving it out is the resource's one shared limit)", () => {
    const e = codeOf(() => compileActivityOptions({ limiter, activities: { a: { resource: 'api:a', key: '' } } }));
    expect(e).toMatchObject({ code: 'SLUICE_ERR_INVALID_KEY', field: 'activities.a.key' });
    expect(
      compileActivityOptions({ limiter, activities: { a: { resource: 'api:a' } } }).activities.get('a')?.[0]?.key,
    ).toBeUndefined();
  });

  it('fills defaults and renews concurrency permits at a third of their permitTtlMs', async () => {
    const real = new Limiter({
      resources: { pool: { algorithm: 'concurrency', limit: 2, permitTtlMs: 3000 }, 'api:a': { algorithm: 'gcra', limit: 5 } },
    });
    const o = compileActivityOptions({
      limiter: real,
      activities: { q: { resource: 'pool' }, r: { resource: 'api:a', mode: 'non-blocking' } },
    });
    expect(o.mode).toBe('blocking');
    expect(o.activities.get('q')![0]!.renewIntervalMs).toBe(1000);
    expect(o.activities.get('q')![0]!.cost([])).toBe(1);
    expect(o.activities.get('r')![0]!.mode).toBe('non-blocking');
    expect(Object.isFrozen(o)).toBe(true);
    await real.close();
  });
});
