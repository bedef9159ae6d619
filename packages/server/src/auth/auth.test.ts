import { describe, expect, it } from 'vitest';
import { matchesAny, outcomeAccess } from './auth.js';

const ADMIN = 'admin-token-0123456789';
const API = 'api-token-0123456789ab';
const OUTCOMES = 'outcomes-token-012345';
const bearer = (t: string) => `Bearer ${t}`;

describe('who may report outcomes', () => {
  it('takes the outcomes and admin tokens, not the api token, once an outcomes token is set', () => {
    const a = outcomeAccess({ outcomesToken: OUTCOMES, apiToken: API, adminToken: ADMIN });
    expect([OUTCOMES, ADMIN, API, 'x'.repeat(20)].map((t) => a.allows(bearer(t)))).toEqual([true, true, false, false]);
    expect(a.allows(undefined)).toBe(false);
    expect(a.allows(OUTCOMES)).toBe(false); // no scheme
    expect(a.reporters).toEqual(['outcomes token', 'admin token']);
  });

  it('takes the api token while no outcomes token is set', () => {
    const a = outcomeAccess({ apiToken: API, adminToken: ADMIN });
    expect([API, ADMIN, OUTCOMES].map((t) => a.allows(bearer(t)))).toEqual([true, true, false]);
  });

  it('takes only the admin token on an open data plane, and nothing without one', () => {
    const admin = outcomeAccess({ adminToken: ADMIN });
    expect(admin.allows(undefined)).toBe(false);
    expect(admin.allows(bearer(ADMIN))).toBe(true);
    expect(admin.refusal).toMatch(/the data plane is open, reports are not/);
    const none = outcomeAccess({});
    expect(none.allows(bearer(ADMIN))).toBe(false);
    expect(none.reporters).toEqual([]);
    expect(none.refusal).toMatch(/^outcome reports are off/);
  });

  it('takes anyone with openOutcomes on an open data plane only', () => {
    expect(outcomeAccess({ openOutcomes: true }).allows(undefined)).toBe(true);
    expect(outcomeAccess({ openOutcomes: true, apiToken: API }).allows(undefined)).toBe(false);
  });

  it('matches a bearer value against any of several tokens', () => {
    expect(matchesAny(bearer(API), [ADMIN, API])).toBe(true);
    expect(matchesAny(`bearer  ${API}`, [API])).toBe(true);
    expect(matchesAny(bearer(API), [])).toBe(false);
    expect(matchesAny(`Basic ${API}`, [API])).toBe(false);
  });
});
