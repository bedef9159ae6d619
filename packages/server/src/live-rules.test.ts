import { Limiter, ManualClock } from '@sluice/core';
import { afterEach, describe, expect, it } from 'vitest';
import { LiveRules, UPDATE_SLICE, limiterResourceName, type RulesAppliedEvent } from './live-rules.js';
import { ruleVersion } from '../test/rule-version.js';

const V1 = `
resources:
  a: { limits: { algorithm: fixed-window, limit: 1 } }
  b: { limits: { algorithm: fixed-window, limit: 5 } }
domains:
  - domain: edge
    descriptors:
      - key: ip
        rate_limit: { unit: second, requests_per_unit: 2 }
`;
const V2 = `
resources:
  a: { limits: { algorithm: fixed-window, limit: 3 } }
  c: { limits: { algorithm: fixed-window, limit: 1 } }
`;

describe('LiveRules', () => {
  const limiter = new Limiter({ resources: {}, clock: new ManualClock() });
  afterEach(() => undefined);

  it('pushes a version into the limiter, tells what changed, and refuses removed resources', async () => {
    const events: RulesAppliedEvent[] = [];
    const rules = new LiveRules({ limiter, onApplied: (e) => events.push(e) });
    expect(rules.apply(ruleVersion(V1, 1))).toBe(true);
    expect(events[0]).toEqual({ version: 1, added: ['a', 'b', 'envoy:edge.ip'], changed: [], removed: [] });
    expect(rules.has('a') && rules.has('envoy:edge.ip')).toBe(true);
    expect(limiter.limitsOf('a')[0]!.limit).toBe(1);
    expect(Object.keys(rules.domains)).toEqual(['edge']);

    expect(rules.apply(ruleVersion(V2, 2))).toBe(true);
    expect(events[1]).toEqual({ version: 2, added: ['c'], changed: ['a'], removed: ['b', 'envoy:edge.ip'] });
    expect(limiter.limitsOf('a')[0]!.limit).toBe(3);
    expect(rules.has('b')).toBe(false);
    expect(rules.domains).toEqual({});
    expect(rules.resourceNames().sort()).toEqual(['a', 'c']);
  });

  it('ignores versions older than the active one', () => {
    const rules = new LiveRules({ limiter });
    rules.apply(ruleVersion(V2, 5));
    expect(rules.apply(ruleVersion(V1, 4))).toBe(false);
    expect(rules.apply(ruleVersion(V1, 5))).toBe(false);
    expect(rules.version?.version).toBe(5);
    expect(rules.has('b')).toBe(false);
  });

  it('updates in slices that let other work run, swaps the whole version at once, and keeps the order', async () => {
    const many = `resources:\n${Array.from({ length: 4 * UPDATE_SLICE }, (_, i) => `  r${i}: { limits: { algorithm: fixed-window, limit: ${i + 1} } }`).join('\n')}\n`;
    const rules = new LiveRules({ limiter });
    let ranWhileChecking = 0;
    let sawHalf = false;
    const update = rules.update(ruleVersion(many, 1));
    // Other work of the event loop runs while the version is checked; it never sees part of it.
    for (let i = 0; i < 3; i++) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (rules.version === undefined) ranWhileChecking++;
      if (rules.version === undefined && rules.has('r0')) sawHalf = true;
    }
    const older = rules.update(ruleVersion(V1, 1));
    expect(await update).toBe(true);
    expect(await older).toBe(false);
    expect(ranWhileChecking).toBeGreaterThan(0);
    expect(sawHalf).toBe(false);
    expect(rules.resourceNames()).toHaveLength(4 * UPDATE_SLICE);
    expect(limiter.limitsOf(`r${4 * UPDATE_SLICE - 1}`)[0]!.limit).toBe(4 * UPDATE_SLICE);
    // A version applied at once while an update is being checked wins; the update is dropped.
    const late = rules.update(ruleVersion(many.replace('limit: 1 }', 'limit: 2 }'), 3));
    expect(rules.apply(ruleVersion(V2, 4))).toBe(true);
    expect(await late).toBe(false);
    await rules.settled();
    expect(rules.version?.version).toBe(4);
  });

  it('gives digest-named envoy limits a name the limiter accepts', () => {
    expect(limiterResourceName('db:users')).toBe('db:users');
    const name = limiterResourceName('envoy:~0123456789abcdef');
    expect(name).toMatch(/^envoy@[0-9a-f]{40}$/);
    expect(limiterResourceName('envoy:~0123456789abcdef')).toBe(name);
  });
});
