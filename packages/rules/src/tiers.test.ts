import { Limiter, ManualClock } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { compileRules } from './index.js';

const FILE = `
resources:
  payments:
    limits: { algorithm: fixed-window, limit: 10, windowMs: 60000 }
    priority:
      tiers:
        - { name: vip, share: 0.2 }
        - { name: standard }
      default: standard
    boost: { limit: 3, windowMs: 60000, algorithm: fixed-window, tiers: [vip] }
`;

describe('priority tiers and the boost pool in rule files', () => {
  it('compiles them frozen, as the limiter takes them', async () => {
    const rules = compileRules(FILE, { file: 'tiers.yaml' });
    const rule = rules.resources.payments!;
    expect(rule.priority).toEqual({ tiers: [{ name: 'vip', share: 0.2 }, { name: 'standard' }], default: 'standard' });
    expect(Object.isFrozen(rule.priority!.tiers![0])).toBe(true);
    expect(Object.isFrozen(rule.boost!.tiers)).toBe(true);
    const limiter = new Limiter({ clock: new ManualClock(), resources: {} });
    limiter.setResources(rules.resources);
    let standard = 0;
    for (let i = 0; i < 12; i++) if ((await limiter.try('payments')).allowed) standard++;
    const vip = [];
    for (let i = 0; i < 6; i++) vip.push(await limiter.try('payments', { priority: 'vip' }));
    expect(standard).toBe(8);
    expect(vip.filter((d) => d.allowed && d.boosted !== true)).toHaveLength(2);
    expect(vip.filter((d) => d.boosted === true)).toHaveLength(3);
    await limiter.close();
  });
});
