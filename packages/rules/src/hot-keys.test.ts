import { Limiter, ManualClock } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { compileRules } from './index.js';

const FILE = `
resources:
  api:payments:
    limits: { algorithm: fixed-window, limit: 100000, windowMs: 60000 }
    hotKeys:
      windowMs: 10000
      threshold: { rate: 500, share: 0.2 }
      action: lease
      lease: { ttlMs: 200 }
      coolAfterMs: 30000
  api:search:
    limits: { algorithm: gcra, limit: 100 }
    hotKeys: true
`;

describe('hot keys in rule files', () => {
  const rules = compileRules(FILE, { file: 'rules.yaml' });

  it('carries the settings to the limiter as written, frozen', () => {
    expect(rules.resources['api:payments']!.hotKeys).toEqual({
      windowMs: 10_000,
      threshold: { rate: 500, share: 0.2 },
      action: 'lease',
      lease: { ttlMs: 200 },
      coolAfterMs: 30_000,
    });
    expect(Object.isFrozen(rules.resources['api:payments']!.hotKeys)).toBe(true);
    expect(rules.resources['api:search']!.hotKeys).toBe(true);
  });

  it('gives a limiter that tracks both resources', async () => {
    const limiter = new Limiter({ clock: new ManualClock(), resources: rules.resources });
    await limiter.try('api:search', { key: 'q' });
    expect(limiter.hotKeys().map((r) => r.resource)).toEqual(['api:payments', 'api:search']);
    await limiter.close();
  });
});
