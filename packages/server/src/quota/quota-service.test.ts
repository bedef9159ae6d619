import { describe, expect, it, vi } from 'vitest';
import type { AdjustItem, ReserveItem } from '@sluice/core/wire';
import { compileRules } from '@sluice/rules';
import { QuotaService, type BucketAction } from './quota-service.js';
import { capacityOf } from './shares.js';

const RULES_TEXT = `
resources:
  api:shared: { limits: { algorithm: sliding-window, limit: 100, windowMs: 1000 } }
quota:
  - domain: gateway
    buckets:
      - { bucket: { name: shared }, resource: api:shared }
      - { bucket: { name: user, id: '*' }, perValue: [id], resource: api:shared }
`;
const RULES = compileRules(RULES_TEXT, { file: 'rules.yaml' });

/** A store of `free` permits: reservations take from it, adjustments give back or take. */
function fakeStore(free: number) {
  const calls: (['reserve', ReserveItem] | ['adjust', AdjustItem])[] = [];
  let now = 1_000_000;
  let left = free;
  let rules = RULES;
  const quota = new QuotaService(
    {
      rules: () => rules,
      reserve: (item) => {
        calls.push(['reserve', item]);
        const granted = Math.min(item.max, left);
        left -= granted;
        return Promise.resolve({ granted: granted >= item.min ? granted : 0, at: now + (item.holdMs ?? 0) });
      },
      adjust: (item) => {
        calls.push(['adjust', item]);
        left -= item.delta;
        return Promise.resolve();
      },
      now: () => now,
    },
    { maxBuckets: 3 },
  );
  return {
    quota,
    calls,
    advance: (ms: number) => (now += ms),
    left: () => left,
    refill: (n: number) => (left += n),
    setRules: (text: string) => (rules = compileRules(text, { file: 'rules.yaml' })),
  };
}

const usage = (bucket: Record<string, string>, allowed: number, denied = 0, elapsedMs = 1000) => ({
  bucket,
  elapsedMs,
  allowed,
  denied,
});
const assigned = (a: BucketAction | undefined) => {
  if (a?.kind !== 'assign') throw new Error(`not an assignment: ${JSON.stringify(a)}`);
  return a;
};

describe('QuotaService', () => {
  it('takes what an assignment can admit in the store first, and hands out no more', async () => {
    const { quota, calls } = fakeStore(1000);
    const s = quota.open();
    const [a] = await s.report('gateway', [usage({ name: 'shared' }, 0, 20)]);
    const first = assigned(a);
    expect(first.ttlMs).toBe(2000);
    const reserve = calls[0]!;
    expect(reserve[0]).toBe('reserve');
    const item = reserve[1] as ReserveItem;
    expect(item).toMatchObject({ resource: 'api:shared', min: 1, holdMs: 2000 });
    expect(capacityOf(first.strategy, first.ttlMs)).toBeLessThanOrEqual(item.max);
    // Demand 20/s with 25% headroom: about 25 a second.
    expect(first.strategy).toMatchObject({ kind: 'token-bucket' });
  });

  it('charges admissions beyond what was held, and returns what is no longer needed', async () => {
    const { quota, calls, left } = fakeStore(1000);
    const s = quota.open();
    await s.report('gateway', [usage({ name: 'shared' }, 0, 40)]);
    const held = 1000 - left();
    // It admitted more than was held (say, while an assignment was replaced): the rest is charged.
    calls.length = 0;
    await s.report('gateway', [usage({ name: 'shared' }, held + 5, 0)]);
    expect(calls[0]).toEqual(['adjust', { resource: 'api:shared', delta: 5 }]);
    // Demand falls to nothing: part of what is held goes back, at the newest reservation's stamp.
    calls.length = 0;
    await s.report('gateway', [usage({ name: 'shared' }, 0, 0)]);
    const back = calls.find((c) => c[0] === 'adjust')?.[1];
    expect(back?.delta).toBeLessThan(0);
    expect(back?.at).toBeGreaterThan(0);
  });

  it('shares one key max-min fairly among the streams by their demand', async () => {
    const { quota } = fakeStore(100_000);
    const [one, two, three] = [quota.open(), quota.open(), quota.open()];
    const rate = async (s: typeof one, demand: number) => {
      const a = assigned((await s.report('gateway', [usage({ name: 'shared' }, 0, demand)]))[0]);
      return a.strategy.kind === 'token-bucket' ? (a.strategy.tokensPerFill * 1000) / a.strategy.fillIntervalMs : 0;
    };
    await rate(one, 10);
    await rate(two, 10);
    await rate(three, 300);
    expect(quota.subscribers('api:shared')).toBe(3);
    // 100 a second: 12.5 each for the two small ones, the rest (75) for the large one.
    expect(await rate(one, 10)).toBeCloseTo(12.5, 0);
    expect(await rate(three, 300)).toBeGreaterThan(70);
    expect(await rate(three, 300)).toBeLessThanOrEqual(76);
    one.close();
    expect(quota.subscribers('api:shared')).toBe(2);
  });

  it('shrinks the larger shares when the store runs short, so the first to reserve does not starve the rest', async () => {
    // The store frees 60 permits a second (other callers take the rest of the 100), and the
    // largest subscriber always reports first: served first-come, it would take all of them.
    const { quota, advance, refill } = fakeStore(0);
    const [big, one, two] = [quota.open(), quota.open(), quota.open()];
    const got = new Map<typeof big, number>();
    const report = async (s: typeof big, demand: number) => {
      // It admitted its demand, at most what its last assignment allows in one interval (half
      // its time to live).
      const allowed = Math.min(demand, Math.floor((got.get(s) ?? 0) / 2));
      const a = assigned((await s.report('gateway', [usage({ name: 'shared' }, allowed, Math.max(0, demand - allowed))]))[0]);
      got.set(s, a.strategy.kind === 'token-bucket' ? capacityOf(a.strategy, a.ttlMs) : 0);
      return got.get(s)!;
    };
    const rounds: number[][] = [];
    for (let round = 0; round < 12; round++) {
      refill(60);
      rounds.push([await report(big, 300), await report(one, 10), await report(two, 10)]);
      advance(1000);
    }
    // First-come, the small ones get nothing at first; once the shares shrink, each can admit at
    // least three quarters of its demand (10 a second, over a 2 s assignment) in every later round.
    expect(rounds[1]![1]).toBeLessThan(10);
    for (const [, a, b] of rounds.slice(4)) {
      expect(a).toBeGreaterThanOrEqual(15);
      expect(b).toBeGreaterThanOrEqual(15);
    }
  });

  it('pushes, between reports, a new assignment to the buckets a rule change moves, and abandons the unmatched', async () => {
    const { quota, setRules } = fakeStore(100_000);
    const s = quota.open();
    const pushes: BucketAction[][] = [];
    s.onPush = (actions) => pushes.push(actions);
    await s.report('gateway', [usage({ name: 'shared' }, 0, 80), usage({ name: 'user', id: '1' }, 0, 80)]);
    const before = await s.report('gateway', [usage({ name: 'shared' }, 40, 40)]);
    const rateOf = (a: BucketAction | undefined) => {
      const { strategy } = assigned(a);
      return strategy.kind === 'token-bucket' ? (strategy.tokensPerFill * 1000) / strategy.fillIntervalMs : 0;
    };
    expect(rateOf(before[0])).toBeGreaterThan(50);

    // The limit falls to 20 a second: one push, with smaller buckets for both.
    setRules(RULES_TEXT.replace('limit: 100', 'limit: 20'));
    quota.limitsChanged();
    await vi.waitFor(() => expect(pushes).toHaveLength(1));
    expect(pushes[0]!.map((a) => a.bucket)).toEqual([{ name: 'shared' }, { name: 'user', id: '1' }]);
    for (const a of pushes[0]!) expect(rateOf(a)).toBeLessThanOrEqual(20);

    // A change that leaves their rate alone pushes nothing; one that drops the per-user entry
    // abandons that bucket.
    setRules(
      RULES_TEXT.replace('limit: 100', 'limit: 20').replace(
        "      - { bucket: { name: user, id: '*' }, perValue: [id], resource: api:shared }\n",
        '',
      ),
    );
    quota.limitsChanged();
    await vi.waitFor(() => expect(pushes).toHaveLength(2));
    expect(pushes[1]).toEqual([{ kind: 'abandon', bucket: { name: 'user', id: '1' } }]);
    expect(s.size).toBe(1);

    // A closed stream is not pushed to.
    s.close();
    setRules(RULES_TEXT);
    quota.limitsChanged();
    await new Promise((r) => setTimeout(r, 10));
    expect(pushes).toHaveLength(2);
  });

  it('gives each value its own key, and abandons what no rule matches or is no longer reported', async () => {
    const { quota, calls, advance } = fakeStore(1000);
    const s = quota.open();
    const actions = await s.report('gateway', [usage({ name: 'user', id: '7' }, 0, 1), usage({ name: 'nope' }, 0, 1)]);
    expect(actions.map((a) => a.kind)).toEqual(['assign', 'abandon']);
    expect((calls[0]![1] as ReserveItem).key).toBe('2:id1:7');
    advance(10_000);
    const later = await s.report('gateway', [usage({ name: 'shared' }, 0, 1)]);
    expect(later.map((a) => [a.kind, a.bucket])).toEqual([
      ['assign', { name: 'shared' }],
      ['abandon', { name: 'user', id: '7' }],
    ]);
    expect(s.size).toBe(1);
  });

  it('refuses a stream without a domain, another domain, a bucket twice, and too many buckets', async () => {
    const { quota } = fakeStore(1000);
    await expect(quota.open().report('', [usage({ name: 'shared' }, 0, 1)])).rejects.toThrow(
      'the first report of a stream must name its domain',
    );
    const s = quota.open();
    await s.report('gateway', [usage({ name: 'shared' }, 0, 1)]);
    await expect(s.report('edge', [])).rejects.toThrow('a stream keeps the domain of its first report ("gateway")');
    await expect(s.report('', [usage({ name: 'x' }, 0, 1), usage({ name: 'x' }, 0, 1)])).rejects.toThrow('reported twice');
    const many = [1, 2, 3].map((i) => usage({ name: 'user', id: String(i) }, 0, 1));
    await expect(s.report('', many)).rejects.toThrow('a stream may subscribe to at most 3 buckets, this report would make 4');
  });
});
