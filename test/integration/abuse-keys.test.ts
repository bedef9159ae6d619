/* eslint-disable @typescript-eslint/no-explicit-any --
   the assertions read parsed JSON and protobuf answers dynamically */
/**
 * One key, one state, against the real service (`sluice serve`, built CLI) on the embedded store
 * and on Redis: a caller's key, a tenant's quota, a priority's pre-filter entry and a split
 * share each have a namespace of their own, so no key an outsider sends names another's state;
 * strings with no UTF-8 form (lone surrogates, invalid bytes) are refused and change nothing.
 */
import { ErrorCodes, Limiter, type LimitStore, type ResourceConfig } from '@sluice/core';
import { RedisStore } from '@sluice/redis';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RlsClient, loadRlsDefinition } from '../../packages/server/test/support.js';
import { randomPrefix, redisUrl } from '../env.js';
import { TOKEN, rulesFile, spawnServe, type Serve } from '../sluice-serve.js';

const HOUR = 3_600_000;

/** The rules, with `api:hot` as given (split in a later version). */
const RULES = (hot: string) => `
resources:
  api:tenants:
    limits:
      - { algorithm: concurrency, limit: 50, permitTtlMs: ${HOUR} }
      - { algorithm: sliding-window, limit: 1000, windowMs: ${HOUR} }
    priority: { coreShare: 0.2 }
    tenants:
      acme: { limits: { algorithm: token-bucket, limit: 5, windowMs: ${HOUR} } }
  api:jobs:
    limits: { algorithm: concurrency, limit: 20, permitTtlMs: ${HOUR} }
    tenants:
      initech: { limits: { algorithm: fixed-window, limit: 100, windowMs: ${HOUR} } }
  api:reserved:
    limits: { algorithm: fixed-window, limit: 4, windowMs: ${HOUR} }
    priority: { coreShare: 0.5 }
  api:plain:
    limits: { algorithm: fixed-window, limit: 2, windowMs: ${HOUR} }
  api:hot:
    ${hot}
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: { unit: hour, requests_per_unit: 1 }
`;
const UNSPLIT = `limits: { algorithm: fixed-window, limit: 4, windowMs: ${HOUR} }`;
const SPLIT = `{ limits: { algorithm: fixed-window, limit: 6, windowMs: ${HOUR} }, split: 2 }`;

/** POSTs `body` (an object, or raw bytes) and parses the answer; never throws for a status. */
async function post(base: string, path: string, body: object | Buffer, token?: string): Promise<{ status: number; json: any }> {
  const res = await fetch(new URL(path, base), {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    body: Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

/** A RateLimitRequest for descriptor `user=Q?` whose second value byte is `byte`. */
function requestWithValueByte(byte: number): Buffer {
  const method = loadRlsDefinition().ShouldRateLimit!;
  const bytes = Buffer.from(
    method.requestSerialize({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'QQ' }] }], hits_addend: 0 }),
  );
  const at = bytes.indexOf('QQ');
  bytes[at + 1] = byte;
  return bytes;
}

const STORES = [
  { name: 'embedded', redis: false },
  { name: 'redis', redis: true },
];

describe.each(STORES)('one key, one state: $name store', ({ redis }) => {
  const rules = rulesFile(RULES(UNSPLIT));
  let serve: Serve;
  let rls: RlsClient;
  const check = async (item: object) => post(serve.url, '/v1/check', item);
  /** Calls `item` `times` times; how many were admitted. */
  const admitted = async (item: object, times: number) => {
    let n = 0;
    for (let i = 0; i < times; i++) {
      const a = await check(item);
      expect(a.status).toBe(200);
      if (a.json.allowed === true) n++;
    }
    return n;
  };

  beforeAll(async () => {
    serve = await spawnServe({
      rules: rules.path,
      ...(redis ? { redis: redisUrl(), prefix: randomPrefix('abuse-keys') } : {}),
    });
    rls = new RlsClient(`127.0.0.1:${serve.grpcPort}`);
  });
  afterAll(async () => {
    rls?.close();
    await serve?.stop();
    rules.remove();
  });

  it("a key named like a tenant leaves the tenant's exhausted quota as it is", async () => {
    const acme = { resource: 'api:tenants', key: 'u1', tenant: 'acme', priority: 'core' };
    expect(await admitted(acme, 8)).toBe(5);
    // The key `@acme` draws on the resource's limits under a key of its own.
    const attack = await check({ resource: 'api:tenants', key: '@acme', priority: 'core' });
    expect(await admitted(acme, 20)).toBe(0);
    expect(attack.json.allowed).toBe(true);
  });

  it("a tenant's call leaves the concurrency leases held under a key named like it", async () => {
    const held = { resource: 'api:jobs', key: '@initech' };
    expect(await admitted(held, 21)).toBe(20);
    const tenant = await check({ resource: 'api:jobs', key: 'other', tenant: 'initech' });
    expect(tenant.json.allowed).toBe(true);
    // The 20 leases are still held: the key stays at its limit.
    const after = await check(held);
    expect(after.json).toMatchObject({ allowed: false, reason: 'concurrency_limited' });
  });

  it('core traffic on key `v\\u0000normal` does not deny normal traffic on key `v`', async () => {
    const core = { resource: 'api:reserved', key: 'v\u0000normal', priority: 'core' };
    expect(await admitted(core, 6)).toBe(4);
    const normal = await check({ resource: 'api:reserved', key: 'v', priority: 'normal' });
    expect(normal.json).toMatchObject({ allowed: true });
    expect(normal.json.source).not.toBe('prefilter');
  });

  it('refuses keys and tenants with lone surrogates, and they change nothing', async () => {
    const replacement = { resource: 'api:plain', key: 'k\ufffd' };
    expect((await check(replacement)).json).toMatchObject({ allowed: true, remaining: 1 });
    for (const lone of ['\ud800', '\udbff', '\udc00']) {
      const a = await check({ resource: 'api:plain', key: `k${lone}` });
      expect(a.status, JSON.stringify(lone)).toBe(400);
      expect(a.json.error).toMatchObject({ code: 'SLUICE_ERR_INVALID_KEY', field: 'key' });
      const t = await check({ resource: 'api:plain', key: 'k\ufffd', tenant: `t${lone}` });
      expect(t.status).toBe(400);
      expect(t.json.error).toMatchObject({ code: 'SLUICE_ERR_INVALID_OPTIONS', field: 'tenant' });
    }
    // Exactly one permit of `k\ufffd` is left: the refused calls took none.
    expect((await check(replacement)).json).toMatchObject({ allowed: true, remaining: 0 });
    expect((await check(replacement)).json).toMatchObject({ allowed: false });
  });

  it('refuses an HTTP body that is not valid UTF-8, and it changes nothing', async () => {
    const key = { resource: 'api:plain', key: 'b\ufffd' };
    expect((await check(key)).json).toMatchObject({ allowed: true, remaining: 1 });
    for (const byte of [0xfe, 0xff]) {
      const body = Buffer.concat([Buffer.from('{"resource":"api:plain","key":"b'), Buffer.from([byte]), Buffer.from('"}')]);
      const a = await post(serve.url, '/v1/check', body);
      expect(a.status).toBe(400);
      expect(a.json.error.code).toBe('SLUICE_ERR_MALFORMED_BODY');
    }
    expect((await check(key)).json).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('answers INVALID_ARGUMENT to descriptor values that are not valid UTF-8, and they change nothing', async () => {
    for (const byte of [0xfe, 0xff]) {
      const a = await rls.raw(requestWithValueByte(byte));
      expect(a.error, `0x${byte.toString(16)}`).toMatchObject({ code: 3, sluice: 'SLUICE_ERR_INVALID_REQUEST' });
      expect(a.error.details).toContain('descriptors[0].entries[0].value');
    }
    // U+FFFD sent as valid UTF-8 is a value of its own, with its own counter (1 an hour).
    const ask = () =>
      rls.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'Q\ufffd' }] }], hits_addend: 0 });
    expect((await ask()).overall_code).toBe('OK');
    expect((await ask()).overall_code).toBe('OVER_LIMIT');
  });

  // Last: it changes the rules.
  it("a split key's shares are not the state of keys named like them, across a rule change", async () => {
    expect(await admitted({ resource: 'api:hot', key: 'a#0' }, 5)).toBe(4);
    const applied = await post(serve.url, '/v1/admin/rules', { text: RULES(SPLIT), author: 'test', reason: 'split' }, TOKEN);
    expect(applied.status).toBe(201);
    // Applied once a fresh key sees the new limit.
    for (let i = 0; ; i++) {
      const probe = await check({ resource: 'api:hot', key: `probe-${i}` });
      if (probe.json.limit === 6) break;
      expect(i, 'the new rules were not applied').toBeLessThan(400);
      await new Promise((r) => setTimeout(r, 25));
    }
    // Key `a` is spread over two shares of 3; neither is the state of key `a#0`.
    expect(await admitted({ resource: 'api:hot', key: 'a' }, 8)).toBe(6);
  });
});

/** A call's identity: resource (by role), caller key, tenant and priority. */
interface Tuple {
  readonly r: 'a' | 's' | 'p';
  readonly key: string;
  readonly tenant: string | undefined;
  readonly priority: 'core' | 'normal';
}

/** Resources of one run, named under `salt` so runs never share state: plain, split, reserved share. */
function resourcesOf(salt: string): Record<string, ResourceConfig> {
  const tenants = { '*': { algorithm: 'token-bucket', limit: 2, windowMs: HOUR } } as const;
  return {
    [`${salt}:a`]: { limits: { algorithm: 'fixed-window', limit: 3, windowMs: HOUR }, tenants },
    [`${salt}:s`]: { limits: { algorithm: 'fixed-window', limit: 4, windowMs: HOUR }, split: 2, tenants },
    [`${salt}:p`]: { limits: { algorithm: 'fixed-window', limit: 4, windowMs: HOUR }, priority: { coreShare: 0.5 }, tenants },
  };
}

/** Pieces that mean something to some encoding, and surrogate edge cases (pairs only: lone ones are refused). */
const PIECES = ['@', '#', '%', '|', '{', '}', '\u0000', 'a', '0', '\ufffd', '\ud83d\ude00'];
const TENANTS = ['a', '0', '@', '%', '#0', '\ufffd', '{a}'];
/** Keys shaped like another kind's name: a tenant's, a split share's, normal traffic's pre-filter entry's (an empty key is refused: no state to share). */
const LOOKALIKES = [
  'a',
  '0',
  '#0',
  'a#0',
  '#0|a',
  '%',
  '%@a',
  '%%',
  ...TENANTS.map((t) => `@${t}`),
  'a\u0000normal',
  '\u0000normal',
  '\u0000a',
];
const LONE = ['\ud800', '\udbff', '\udc00', '\udfff'];
const tuple: fc.Arbitrary<Tuple> = fc.record({
  r: fc.constantFrom('a', 's', 'p'),
  key: fc.oneof(
    fc.constantFrom(...LOOKALIKES),
    fc.array(fc.constantFrom(...PIECES), { minLength: 1, maxLength: 4 }).map((p) => p.join('')),
  ),
  tenant: fc.option(fc.constantFrom(...TENANTS), { nil: undefined }),
  priority: fc.constantFrom('core', 'normal'),
});
/** Distinct tuples that must not share state: a (resource, key) and a tenant of a resource are used once. */
const tuples = fc
  .uniqueArray(tuple, { minLength: 2, maxLength: 6, selector: (t) => JSON.stringify([t.r, t.key]) })
  .map((list) =>
    list.filter((t, i) => t.tenant === undefined || !list.slice(0, i).some((u) => u.r === t.r && u.tenant === t.tenant)),
  )
  .filter((list) => list.length >= 2);

async function call(limiter: Limiter, salt: string, t: Tuple, key = t.key, tenant = t.tenant) {
  return limiter.try(`${salt}:${t.r}`, { key, priority: t.priority, ...(tenant === undefined ? {} : { tenant }) });
}

/** Calls until the first denial (at most 20); how many were admitted. */
async function drain(limiter: Limiter, salt: string, t: Tuple): Promise<number> {
  let n = 0;
  while (n < 20 && (await call(limiter, salt, t)).allowed) n++;
  return n;
}

let salts = 0;
const nextSalt = () => `k${process.pid}x${salts++}y${Math.random().toString(36).slice(2, 8)}`;

/**
 * The property: exhaust one tuple (after trying it with lone surrogates, which must be refused);
 * every other tuple, charged once before, then admits exactly what it admits on a limiter of
 * its own. Sharing state shows as fewer (exhausted) or more (reset) permits.
 */
function isolated(newLimiter: (salt: string) => Limiter) {
  return fc.asyncProperty(tuples, async ([attacker, ...others]) => {
    const salt = nextSalt();
    const shared = newLimiter(salt);
    try {
      for (const u of [attacker!, ...others]) await call(shared, salt, u);
      for (const lone of LONE) {
        await expect(call(shared, salt, attacker!, `${attacker!.key}${lone}`)).rejects.toMatchObject({
          code: ErrorCodes.INVALID_KEY,
        });
        await expect(call(shared, salt, attacker!, attacker!.key, `t${lone}`)).rejects.toMatchObject({
          code: ErrorCodes.INVALID_OPTIONS,
        });
      }
      await drain(shared, salt, attacker!);
      for (const u of others) {
        const alone = nextSalt();
        const own = newLimiter(alone);
        try {
          await call(own, alone, u);
          expect(await drain(shared, salt, u), JSON.stringify({ attacker, u })).toBe(await drain(own, alone, u));
        } finally {
          await own.close();
        }
      }
    } finally {
      await shared.close();
    }
  });
}

describe('distinct (resource, key, tenant, priority) never share state', () => {
  let redis: RedisStore;
  beforeAll(() => {
    redis = new RedisStore({ url: redisUrl(), prefix: randomPrefix('abuse-keys-prop'), commandTimeoutMs: 5000 });
  });
  afterAll(async () => {
    await redis?.close();
  });
  const limiterOn = (store: LimitStore | undefined) => (salt: string) =>
    new Limiter({ resources: resourcesOf(salt), ...(store === undefined ? {} : { store }), onStoreFailure: 'closed' });

  it('on the in-memory store', async () => {
    await fc.assert(isolated(limiterOn(undefined)), { numRuns: 300 });
  });

  it('on Redis', async () => {
    await fc.assert(isolated(limiterOn(redis)), { numRuns: 100 });
  });
});
