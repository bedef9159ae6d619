/* eslint-disable @typescript-eslint/no-explicit-any --
   the assertions read parsed JSON and protobuf answers dynamically */
/**
 * One key, one state, against the real service (`sluice serve`, built CLI) on the embedded store
 * and on Redis: a caller's key, a tenant's quota, a priority's pre-filter entry and a split
 * share each have a namespace of their own, so no key an outsider sends names another's state;
 * strings with no UTF-8 form (lone surrogates, invalid bytes) are refused and change nothing.
 */
import { loadRlsDefinition } from '@sluice/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RlsClient } from '../../packages/server/test/support.js';
import { randomPrefix, redisUrl } from '../env.js';
import { TOKEN, rulesFile, spawnServe, type Serve } from '../sluice-serve.js';

const HOUR = 3_600_000;

/** The rules, with `api:hot` as given (split in a later version). */
const RULES = (hot: string) => `
resources:
  api:tenants:
    limits: { algorithm: sliding-window, limit: 1000, windowMs: ${HOUR} }
    priority: { reserved: 0.2 }
    tenants:
      acme: { limits: { algorithm: token-bucket, limit: 5, windowMs: ${HOUR} } }
  api:jobs:
    limits: { algorithm: concurrency, limit: 20, leaseTtlMs: ${HOUR} }
    tenants:
      initech: { limits: { algorithm: fixed-window, limit: 100, windowMs: ${HOUR} } }
  api:reserved:
    limits: { algorithm: fixed-window, limit: 4, windowMs: ${HOUR} }
    priority: { reserved: 0.5 }
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
    expect(attack.json.allowed).toBe(true);
    expect(await admitted(acme, 20)).toBe(0);
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
