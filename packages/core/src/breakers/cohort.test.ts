import { describe, expect, it } from 'vitest';
import { COHORT_BUCKETS, cohortAt, cohortBucket } from './cohort.js';

const keys = Array.from({ length: 20_000 }, (_, i) => `user-${i}`);

describe('cohortBucket', () => {
  it('is stable and in range', () => {
    for (const k of keys.slice(0, 100)) {
      const b = cohortBucket('r1', 'payments', k);
      expect(b).toBe(cohortBucket('r1', 'payments', k));
      expect(b).toBeGreaterThanOrEqual(0);
      expect(b).toBeLessThan(COHORT_BUCKETS);
    }
  });

  it('spreads keys evenly enough that a share picks about that share of keys', () => {
    for (const percent of [1, 10, 50]) {
      const n = keys.filter((k) => cohortAt(percent, 'r1', 'payments', k) === 'candidate').length;
      expect(n / keys.length).toBeGreaterThan((percent / 100) * 0.8);
      expect(n / keys.length).toBeLessThan((percent / 100) * 1.2);
    }
  });

  it('keeps a candidate key a candidate as the share grows', () => {
    const shares = [1, 10, 50, 100];
    for (const k of keys.slice(0, 2000)) {
      const cohorts = shares.map((p) => cohortAt(p, 'r1', 'payments', k));
      const first = cohorts.indexOf('candidate');
      expect(first).toBeGreaterThanOrEqual(0);
      expect(cohorts.slice(first).every((c) => c === 'candidate')).toBe(true);
    }
  });

  it('puts nobody in the candidate cohort at 0 % and everybody at 100 %', () => {
    expect(keys.some((k) => cohortAt(0, 'r1', 'x', k) === 'candidate')).toBe(false);
    expect(keys.every((k) => cohortAt(100, 'r1', 'x', k) === 'candidate')).toBe(true);
  });

  it('picks other keys for another rollout, resource or part boundary', () => {
    const a = keys.slice(0, 1000).filter((k) => cohortAt(10, 'r1', 'payments', k) === 'candidate');
    const b = keys.slice(0, 1000).filter((k) => cohortAt(10, 'r2', 'payments', k) === 'candidate');
    expect(a).not.toEqual(b);
    expect(cohortBucket('a', 'bc', 'd')).not.toBe(cohortBucket('ab', 'c', 'd'));
  });
});
