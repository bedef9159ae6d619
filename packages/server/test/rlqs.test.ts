import { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { SimEnvoy, mostInWindow, type SimBucket } from './rlqs-client.js';
import { arrivalGapMs, rng } from './rng.js';
import { TOKEN, admin, call, eventually, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

// Needs Redis (SLUICE_REDIS_URL). Envoy's rate limit quota service on one `sluice serve`: three
// simulated Envoys (./rlqs-client.ts, built from the vendored protos) and an exact HTTP caller
// share one limit of 200 in any 2 s.

const LIMIT = 200;
const WINDOW_MS = 2000;
const rules = (other: number, mapOther = true) => `
resources:
  api:shared:
    limits: { algorithm: sliding-window, limit: ${LIMIT}, windowMs: ${WINDOW_MS} }
  api:other:
    limits: { algorithm: sliding-window, limit: ${other}, windowMs: 1000 }
  api:random:
    limits: { algorithm: sliding-window, limit: 40, windowMs: 2000 }
quota:
  - domain: gateway
    buckets:
      - bucket: { name: shared }
        resource: api:shared
      - bucket: { name: random }
        resource: api:random
${mapOther ? '      - bucket: { name: other }\n        resource: api:other\n' : ''}`;
const RULES = rules(40);

const auth = `Bearer ${TOKEN}`;

/** The rate (requests a second) of the token bucket a response's first action assigns. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a response as @grpc/proto-loader decodes it
function rateOf(response: any): number {
  const tb = response.bucket_action[0].quota_assignment_action.rate_limit_strategy.token_bucket;
  const perFill = tb.tokens_per_fill === null ? 1 : Number(tb.tokens_per_fill.value);
  const fillMs = Number(tb.fill_interval.seconds) * 1000 + Number(tb.fill_interval.nanos) / 1e6;
  return (perFill * 1000) / fillMs;
}

describe('RLQS on one server and Redis', () => {
  const tmp = scratch();
  const prefix = randomPrefix('rlqs');
  let server: ServerProcess;
  let target: string;

  beforeAll(async () => {
    server = await spawnServer([
      '--rules',
      writeRules(tmp.dir, RULES),
      '--redis',
      redisUrl(),
      '--redis-prefix',
      prefix,
      '--api-token',
      TOKEN,
      '--store-timeout-ms',
      '2000',
    ]);
    target = `127.0.0.1:${server.grpcPort}`;
  });
  afterAll(async () => {
    await server?.stop();
    const redis = new Redis(redisUrl());
    for (const key of await redis.keys(`${prefix}*`)) await redis.del(key);
    redis.disconnect();
    tmp.remove();
  });

  it('hands three Envoys shares that follow their demand, and the limit holds with an HTTP caller on it', async () => {
    const envoys = [0, 1, 2].map(() => new SimEnvoy(target, 'gateway', auth));
    const buckets: SimBucket[] = envoys.map((e) => e.bucket(1, { name: 'shared' }));
    const http: number[] = [];
    try {
      // Phase 1: demand 8, 8 and 24 a second (1:1:3), 40 in all, well within the limit (100 a
      // second over its window) with headroom: each Envoy is served what it asks. Phase 2: the
      // third asks 200 a second; max-min fairness keeps the first two served, the third gets
      // what is left.
      // Demand is owed by wall time, not by loop turns, so a busy machine that runs the loop
      // late offers the same demand; what each Envoy offered is counted, and shares are judged
      // against it.
      const offered = [0, 0, 0];
      const run = async (rates: readonly number[], ms: number) => {
        const tickMs = 25;
        const owed = rates.map(() => 0);
        const started = Date.now();
        let last = started;
        let httpOwed = 0;
        while (Date.now() - started < ms) {
          const now = Date.now();
          const elapsed = now - last;
          last = now;
          for (const [i, e] of envoys.entries()) {
            owed[i]! += (rates[i]! * elapsed) / 1000;
            while (owed[i]! >= 1) {
              owed[i]!--;
              offered[i]!++;
              e.request(buckets[i]!, now);
            }
            e.tick(now, 500);
          }
          // An exact caller of 5 a second on the same resource.
          httpOwed += (5 * elapsed) / 1000;
          if (httpOwed >= 1) {
            httpOwed--;
            const r = await call(server.url, '/v1/check', { resource: 'api:shared' }, { token: TOKEN });
            if (r.json.allowed === true) http.push(Date.now());
          }
          await sleep(tickMs);
        }
      };
      await run([8, 8, 24], 5000);
      const firstPhase = buckets.map((b) => b.admitted.length);
      const firstOffered = [...offered];
      const split = Date.now();
      await run([8, 8, 200], 6000);
      const secondPhase = buckets.map((b, i) => b.admitted.length - firstPhase[i]!);
      const secondOffered = offered.map((n, i) => n - firstOffered[i]!);
      const all = [...buckets.flatMap((b) => b.admitted), ...http].sort((a, b) => a - b);
      const most = mostInWindow(all, WINDOW_MS);
      const inSecond = all.filter((t) => t >= split).length;
      if (process.env.SLUICE_TEST_PRINT)
        console.log(JSON.stringify({ firstPhase, firstOffered, secondPhase, secondOffered, http: http.length, most, inSecond }));

      // Every Envoy was assigned, none abandoned.
      for (const b of buckets) {
        expect(b.assignments).toBeGreaterThan(3);
        expect(b.abandons).toBe(0);
      }
      // Phase 1: shares follow demand; the third Envoy admits well over twice what each of the
      // others does (its demand is three times theirs).
      expect(firstPhase[2]!).toBeGreaterThan(2 * firstPhase[0]!);
      expect(firstPhase[2]!).toBeGreaterThan(2 * firstPhase[1]!);
      // Phase 2: max-min fairness keeps the first two served while the third asks far more than
      // is left: each small one is served at least half of what it offered, and at least twice
      // the fraction the third is served; the third still got more than either. (On a quiet
      // machine the small ones are served 80-100% and the third about a quarter; a loaded one
      // delays reports and replies, and an assignment that expires before its successor arrives
      // denies until it does: the denials' causes are in the message.)
      const served = secondPhase.map((n, i) => n / secondOffered[i]!);
      const why = JSON.stringify({ served, denied: buckets.map((b) => b.denied) });
      for (const i of [0, 1]) {
        expect(served[i]!, why).toBeGreaterThan(0.5);
        expect(served[i]!, why).toBeGreaterThan(2 * served[2]!);
      }
      expect(secondPhase[2]!).toBeGreaterThan(2 * secondPhase[0]!);

      // The bound (docs/quota-service.md): Envoys and the HTTP caller together admit at most
      // the limit in any window of it, plus what Envoys admitted while an assignment was being
      // replaced (charged at their next report); generously, a quarter of the limit more.
      expect(most).toBeLessThanOrEqual(1.25 * LIMIT);
      // And the limit was used: over the 6 s of the second phase, more than the limit's rate
      // over 2 of them.
      expect(inSecond).toBeGreaterThan(LIMIT);
    } finally {
      for (const e of envoys) e.close();
    }
  });

  it("admits an Envoy's random (Poisson) requests below the limit, not only evenly spaced ones", async () => {
    // 8 a second at random against a limit of 20 a second: a share of 10 a second (demand with
    // headroom). A bucket of one token denied about 30% of such arrivals; each request is decided
    // at the time it fell due, however late the loop's turn.
    const envoy = new SimEnvoy(target, 'gateway', auth);
    const bucket = envoy.bucket(1, { name: 'random' });
    const random = rng(8);
    const perSecond = 8;
    const measureFrom = Date.now() + 2000;
    const end = measureFrom + 10_000;
    let next = Date.now();
    let offered = 0;
    let admitted = 0;
    try {
      while (Date.now() < end) {
        const now = Date.now();
        for (; next <= now; next += arrivalGapMs(random, perSecond)) {
          const ok = envoy.request(bucket, next);
          if (next >= measureFrom) {
            offered++;
            if (ok) admitted++;
          }
        }
        envoy.tick(now, 500);
        await sleep(20);
      }
      if (process.env.SLUICE_TEST_PRINT) console.log(JSON.stringify({ admitted, offered, denied: bucket.denied }));
      expect(bucket.assignments).toBeGreaterThan(3);
      expect(offered).toBeGreaterThan(40);
      expect(admitted, `${admitted} of ${offered}, denied ${JSON.stringify(bucket.denied)}`).toBeGreaterThanOrEqual(
        0.85 * offered,
      );
    } finally {
      envoy.close();
    }
  });

  it('abandons a bucket no rule matches', async () => {
    const e = new SimEnvoy(target, 'gateway', auth);
    try {
      const b = e.bucket(7, { name: 'unknown' });
      e.request(b, Date.now());
      await eventually(async () => b.abandons === 1);
      expect(b.assignments).toBe(0);
    } finally {
      e.close();
    }
  });

  it('ends the stream of a malformed report with INVALID_ARGUMENT, and goes on serving', async () => {
    const bad = new SimEnvoy(target, 'gateway', auth);
    // Field 2 (the usage map) as a varint: not a RateLimitQuotaUsageReports.
    bad.writeRaw(Buffer.from([0x10, 0x01]));
    const status = await bad.ended;
    expect(status).toMatchObject({ code: 3, sluice: 'SLUICE_ERR_MALFORMED_BODY' });
    bad.close();

    const noElapsed = new SimEnvoy(target, 'gateway', auth);
    noElapsed.send({ domain: 'gateway', bucket_quota_usages: { '1': { bucket_id: { bucket: { name: 'shared' } } } } });
    expect(await noElapsed.ended).toMatchObject({ code: 3, sluice: 'SLUICE_ERR_INVALID_REQUEST' });
    expect((await noElapsed.ended).details).toContain('time_elapsed: is required');
    noElapsed.close();

    const noDomain = new SimEnvoy(target, '', auth);
    const b = noDomain.bucket(1, { name: 'shared' });
    noDomain.request(b, Date.now());
    expect((await noDomain.ended).details).toContain('the first report of a stream must name its domain');
    noDomain.close();

    // The server still serves a new stream, and ShouldRateLimit's neighbours.
    const good = new SimEnvoy(target, 'gateway', auth);
    try {
      const g = good.bucket(1, { name: 'shared' });
      good.request(g, Date.now());
      await eventually(async () => g.assignments >= 1);
      expect((await call(server.url, '/v1/check', { resource: 'api:other' }, { token: TOKEN })).json.allowed).toBe(true);
    } finally {
      good.close();
    }
  });

  it('refuses a stream without the data-plane token with UNAUTHENTICATED', async () => {
    for (const authorization of [undefined, 'Bearer wrong']) {
      const e = new SimEnvoy(target, 'gateway', authorization);
      const b = e.bucket(1, { name: 'shared' });
      e.request(b, Date.now());
      expect(await e.ended).toMatchObject({ code: 16, sluice: 'SLUICE_ERR_UNAUTHORIZED' });
      expect(b.assignments).toBe(0);
      e.close();
    }
  });

  it('ends the stream with OK when the Envoy ends its side', async () => {
    const e = new SimEnvoy(target, 'gateway', auth);
    const b = e.bucket(1, { name: 'shared' });
    e.request(b, Date.now());
    await eventually(async () => b.assignments >= 1);
    e.end();
    expect((await e.ended).code).toBe(0);
    e.close();
  });

  it('pushes a rule change to the buckets it moves at once, not at their next report', async () => {
    const e = new SimEnvoy(target, 'gateway', auth);
    try {
      const b = e.bucket(1, { name: 'other' });
      e.request(b, Date.now());
      await eventually(async () => b.assignments >= 1);
      expect(rateOf(e.responses[0])).toBeGreaterThan(4);
      // No report is sent from here on: what arrives is pushed.
      expect((await admin(server, '/rules', { text: rules(4), author: 'ops', reason: 'lower' })).status).toBe(201);
      await eventually(async () => e.responses.length >= 2);
      expect(b.assignments).toBe(2);
      expect(rateOf(e.responses[1])).toBeLessThanOrEqual(4);
      expect((await admin(server, '/rules', { text: rules(4, false), author: 'ops', reason: 'unmap' })).status).toBe(201);
      await eventually(async () => b.abandons === 1);
    } finally {
      e.close();
      await admin(server, '/rules', { text: RULES, author: 'ops', reason: 'restore' });
    }
  });

  it('follows a rollout of the limits: the candidate cohort is assigned by the candidate, pushed at each move', async () => {
    const e = new SimEnvoy(target, 'gateway', auth);
    try {
      const b = e.bucket(1, { name: 'other' });
      e.request(b, Date.now());
      await eventually(async () => b.assignments >= 1);
      expect(rateOf(e.responses[0])).toBeGreaterThan(4);
      // Every key on the candidate (api:other down to 4 a second); the judge kept out of it.
      const start = await admin(server, '/rollout', {
        text: rules(4),
        author: 'ops',
        reason: 'other down to 4',
        steps: [{ percent: 100, holdMs: 3_600_000 }],
        thresholds: { minCalls: 1_000_000 },
      });
      expect(start.status).toBe(201);
      // No report is sent: the assignment that follows the rollout is pushed.
      await eventually(async () => e.responses.length >= 2, 20_000, 50);
      expect(rateOf(e.responses.at(-1))).toBeLessThanOrEqual(4);
      // Aborted: back on the version in force, pushed again.
      const seen = e.responses.length;
      expect((await admin(server, '/rollout/abort', { author: 'ops', reason: 'done' })).status).toBe(200);
      await eventually(async () => e.responses.length > seen, 20_000, 50);
      expect(rateOf(e.responses.at(-1))).toBeGreaterThan(4);
    } finally {
      e.close();
    }
  });
});
