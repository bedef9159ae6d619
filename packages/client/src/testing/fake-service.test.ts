import { ManualClock } from '@sluice/core';
import { RemoteLimiter } from '@sluice/client';
import { FakeService } from '@sluice/client/testing';
import { describe, expect, it } from 'vitest';

describe('@sluice/client/testing', () => {
  it('stands in for sluice serve behind the transport option, as the README shows', async () => {
    const clock = new ManualClock();
    const service = new FakeService(
      { 'api:a': { limits: { algorithm: 'fixed-window', limit: 1, windowMs: 1000 }, onStoreFailure: 'closed' } },
      clock,
    );
    const limiter = new RemoteLimiter({ url: 'http://fake', transport: service, clock });
    try {
      expect((await limiter.try('api:a')).allowed).toBe(true);
      expect(await limiter.try('api:a')).toMatchObject({ allowed: false, reason: 'rate_limited', source: 'store' });
      clock.advance(1000);
      expect((await limiter.try('api:a')).allowed).toBe(true);
      expect(service.count('/v1/check')).toBe(3);
      service.down = true;
      expect(await limiter.try('api:a')).toMatchObject({ allowed: false, source: 'fallback' });
    } finally {
      await limiter.close();
    }
    expect(service.closed).toBe(true);
  });
});
