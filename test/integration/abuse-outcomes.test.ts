/* eslint-disable @typescript-eslint/no-explicit-any, @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-return --
   the assertions read parsed JSON and protobuf answers dynamically */
/**
 * Forged outcome reports against the real `sluice serve`, on the embedded store and on Redis:
 * reports steer fleet breakers, rollouts and adaptive limits, so only a reporting credential may
 * send them, and one report may stand for a bounded number of calls.
 */
import * as grpc from '@grpc/grpc-js';
import { cohortAt } from '@sluice/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FAST_ROLLOUT,
  TOKEN,
  admin,
  call,
  eventually,
  reportOutcomes,
  scratch,
  spawnServer,
  writeRules,
  type ServerProcess,
} from '../../packages/server/test/support.js';
import { randomPrefix } from '../env.js';
import { deleteRedisKeys, storeFlags } from '../sluice-serve.js';

const API_TOKEN = 'data-plane-token-0123456789abcdef';
const OUTCOMES_TOKEN = 'outcomes-token-0123456789abcdef';
const BREAKER = '{ scope: fleet, minimumCalls: 20, failureRateThreshold: 0.5, openDurationMs: 600000, syncMs: 50 }';

const rules = (paymentsLimit: number) => `
resources:
  db:victim:
    limits: { algorithm: gcra, limit: 100000, windowMs: 1000 }
    breaker: ${BREAKER}
  db:control:
    limits: { algorithm: gcra, limit: 100000, windowMs: 1000 }
    breaker: ${BREAKER}
  payments:
    limits: { algorithm: fixed-window, limit: ${paymentsLimit}, windowMs: 3600000 }
  db:orders:
    limits: { algorithm: sliding-window, limit: 20, windowMs: 1000 }
adaptive:
  db:orders:
    min: 10
    max: 200
    policy: aimd
    intervalMs: 500
    aimd: { increase: 5, minCalls: 20 }
`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const failures = (resource: string, count: number) => ({ resource, ok: false, durationMs: 5, count });

/** The fleet breaker of `resource` as `GET /v1/breakers` shows it. */
async function breaker(s: ServerProcess, resource: string): Promise<any> {
  return (await call(s.url, '/v1/breakers')).json.breakers.find((b: any) => b.resource === resource);
}

/** The rule versions the adaptive controller wrote. */
async function adaptiveMoves(s: ServerProcess): Promise<any[]> {
  const history = await call(s.url, '/v1/admin/rules/history', undefined, { token: TOKEN });
  return (history.json.versions as any[]).filter((v) => v.author === 'adaptive');
}

const stores: ['embedded store' | 'Redis', boolean][] = [
  ['embedded store', false],
  ['Redis', true],
];

describe.each(stores)('outcome reports on the %s', (_name, redis) => {
  const tmp = scratch();
  const prefixes = [randomPrefix('outcomes-open'), randomPrefix('outcomes-tokens')];
  const flags = (i: number) => (redis ? storeFlags('redis', prefixes[i]) : []);
  /** An open data plane: no api token, no outcomes token (the admin token is set). */
  let open: ServerProcess;
  /** A data-plane token and a reporting token. */
  let tokens: ServerProcess;

  beforeAll(async () => {
    const openRules = writeRules(tmp.dir, rules(1000), 'open.yaml');
    const tokenRules = writeRules(tmp.dir, rules(1000), 'tokens.yaml');
    [open, tokens] = await Promise.all([
      spawnServer(['--rules', openRules, ...flags(0), ...FAST_ROLLOUT]),
      spawnServer([
        '--rules',
        tokenRules,
        '--api-token',
        API_TOKEN,
        '--outcomes-token',
        OUTCOMES_TOKEN,
        ...flags(1),
        ...FAST_ROLLOUT,
      ]),
    ]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([open?.stop(), tokens?.stop()]);
    if (redis) for (const p of prefixes) await deleteRedisKeys(p);
    tmp.remove();
  });

  it('refuses reports without a credential on an open data plane: 10,000 forged failures open no breaker', async () => {
    const forged = [
      failures('db:victim', 10_000),
      // Slow calls: 10,000 successes of a day each.
      { resource: 'db:victim', ok: true, durationMs: 86_400_000, count: 10_000 },
    ];
    for (const body of [forged[0], forged[1], { items: forged }]) {
      const r = await call(open.url, '/v1/outcomes', body);
      expect(r.status).toBe(401);
      expect(r.headers.get('www-authenticate')).toBe('Bearer');
      expect(r.json.error.code).toBe('SLUICE_ERR_UNAUTHORIZED');
    }
    // A data-plane token means nothing where none is configured.
    expect((await call(open.url, '/v1/outcomes', forged[0], { token: API_TOKEN })).status).toBe(401);
    const g = await reportOutcomes(open.grpcPort, [{ resource: 'db:victim', ok: false, duration_ms: 5, count: 10_000 }]);
    expect(g.error).toMatchObject({ code: grpc.status.UNAUTHENTICATED, sluice: 'SLUICE_ERR_UNAUTHORIZED' });

    // One real success through the admin's credential: once the window shows it, it is all there is.
    const real = await call(open.url, '/v1/outcomes', { resource: 'db:victim', ok: true, durationMs: 5 }, { token: TOKEN });
    expect(real.json).toEqual({ recorded: true });
    await eventually(async () => (await breaker(open, 'db:victim'))?.window?.calls === 1);
    expect(await breaker(open, 'db:victim')).toMatchObject({ state: 'closed', window: { calls: 1, failures: 0, slow: 0 } });
    for (let i = 0; i < 20; i++) {
      expect((await call(open.url, '/v1/check', { resource: 'db:victim', key: `victim-${i}` })).json.allowed).toBe(true);
    }
  });

  it('bounds what one report may claim, for every credential', async () => {
    // One item, or a batch, standing for more calls than a report may: refused whole.
    for (const body of [
      failures('db:control', 10_000),
      { items: Array.from({ length: 100 }, () => failures('db:control', 11)) },
    ]) {
      const r = await call(open.url, '/v1/outcomes', body, { token: TOKEN });
      expect(r.status).toBe(413);
      expect(r.json.error.code).toBe('SLUICE_ERR_BATCH_TOO_LARGE');
    }
    // A call longer than an hour (the longest slow-call threshold) is not one anybody timed.
    const long = await call(
      open.url,
      '/v1/outcomes',
      { resource: 'db:control', ok: true, durationMs: 3_600_001 },
      { token: TOKEN },
    );
    expect(long.status).toBe(400);
    expect(long.json.error).toMatchObject({ code: 'SLUICE_ERR_INVALID_REQUEST', field: 'durationMs' });
    const g = await reportOutcomes(
      open.grpcPort,
      [{ resource: 'db:control', ok: false, duration_ms: 5, count: 10_000 }],
      `Bearer ${TOKEN}`,
    );
    expect(g.error).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, sluice: 'SLUICE_ERR_BATCH_TOO_LARGE' });
    expect((await breaker(open, 'db:control')).state).toBe('closed');

    // Within the bounds, the admin's reports are taken: 30 failures open the breaker.
    const ok = await call(open.url, '/v1/outcomes', failures('db:control', 30), { token: TOKEN });
    expect(ok.json).toEqual({ recorded: true });
    await eventually(async () => (await breaker(open, 'db:control'))?.state === 'open');
  });

  it('takes reports from the outcomes token only, not from the data-plane token (HTTP and gRPC)', async () => {
    for (const token of [undefined, API_TOKEN, 'wrong-token-0123456789abcdef']) {
      const r = await call(tokens.url, '/v1/outcomes', failures('db:victim', 100), token === undefined ? {} : { token });
      expect(r.status).toBe(401);
      expect(r.json.error.code).toBe('SLUICE_ERR_UNAUTHORIZED');
      const g = await reportOutcomes(
        tokens.grpcPort,
        [{ resource: 'db:victim', ok: false, duration_ms: 5, count: 100 }],
        token === undefined ? undefined : `Bearer ${token}`,
      );
      expect(g.error).toMatchObject({ code: grpc.status.UNAUTHENTICATED, sluice: 'SLUICE_ERR_UNAUTHORIZED' });
    }
    const real = await reportOutcomes(
      tokens.grpcPort,
      [{ resource: 'db:victim', ok: true, duration_ms: 5 }],
      `Bearer ${OUTCOMES_TOKEN}`,
    );
    expect(real.results.map((x: any) => x.recorded)).toEqual([true]);
    await eventually(async () => (await breaker(tokens, 'db:victim'))?.window?.calls === 1);
    expect(await breaker(tokens, 'db:victim')).toMatchObject({ state: 'closed', window: { calls: 1, failures: 0 } });
    // The outcomes token is no data-plane token.
    expect((await call(tokens.url, '/v1/check', { resource: 'db:victim' }, { token: OUTCOMES_TOKEN })).status).toBe(401);
  });

  it('keeps the rollout id out of public answers, and forged reports cannot roll a rollout back', async () => {
    const start = await admin(tokens, '/rollout', {
      text: rules(999),
      author: 'ana',
      reason: 'new payment provider',
      steps: [{ percent: 50, holdMs: 3_600_000 }],
      thresholds: { minCalls: 20 },
    });
    expect(start.status).toBe(201);
    const id = start.json.rollout.id as string;
    await eventually(async () => (await call(tokens.url, '/v1/rollout')).json.rollout?.percent === 50);

    // What an outsider reads names no id to sort keys into cohorts with.
    const summary = (await call(tokens.url, '/v1/rollout')).json.rollout;
    expect(summary).toMatchObject({ status: 'running', percent: 50 });
    expect(summary.id).toBeUndefined();
    expect(JSON.stringify(summary)).not.toContain(id);
    const outsider = await call(tokens.url, '/v1/resources');
    expect(outsider.json.rollout.percent).toBe(50);
    expect(JSON.stringify(outsider.json)).not.toContain(id);
    // Data-plane clients split their fallback by it.
    expect((await call(tokens.url, '/v1/resources', undefined, { token: API_TOKEN })).json.rollout.id).toBe(id);

    // The attacker is given the id anyway: the candidate's keys fail, the baseline's succeed.
    const keys = Array.from({ length: 80 }, (_, i) => `acct-${i}`);
    const cohort = (k: string) => cohortAt(50, id, 'payments', k);
    expect(keys.filter((k) => cohort(k) === 'candidate').length).toBeGreaterThanOrEqual(20);
    for (const key of keys) {
      expect((await call(tokens.url, '/v1/check', { resource: 'payments', key }, { token: API_TOKEN })).json.allowed).toBe(true);
    }
    const items = keys.map((key) => ({ resource: 'payments', key, ok: cohort(key) === 'baseline', durationMs: 30, count: 10 }));
    for (let round = 0; round < 5; round++) {
      for (const token of [undefined, API_TOKEN]) {
        for (const batch of [items.slice(0, 40), items.slice(40)]) {
          const r = await call(tokens.url, '/v1/outcomes', { items: batch }, token === undefined ? {} : { token });
          expect(r.status).toBe(401);
        }
      }
      // Several of the decider's rounds (every 100 ms) judge what was reported.
      await sleep(600);
      expect((await admin(tokens, '/rollout')).json.rollout.status).toBe('running');
    }

    // The same reports with the reporting credential do roll it back: the judge was listening.
    for (const batch of [items.slice(0, 40), items.slice(40)]) {
      expect((await call(tokens.url, '/v1/outcomes', { items: batch }, { token: OUTCOMES_TOKEN })).status).toBe(200);
    }
    await eventually(async () => (await admin(tokens, '/rollout')).json.rollout?.status === 'rolled_back', 30_000, 200);
  }, 60_000);

  it('forged reports move an adaptive limit in neither direction', async () => {
    // Checks past the limit (so a healthy downstream would raise it) beside the forged reports.
    const drive = async (report: () => Promise<void>, until: () => Promise<boolean>) => {
      for (let i = 0; ; i++) {
        await Promise.all([...[0, 1, 2].map(() => call(open.url, '/v1/check', { resource: 'db:orders', key: 'k' })), report()]);
        await sleep(50);
        if (i % 10 === 9 && (await until())) return;
      }
    };
    const forged = (ok: boolean) => async () => {
      const r = await call(open.url, '/v1/outcomes', { resource: 'db:orders', ok, durationMs: 20, count: 50 });
      expect(r.status).toBe(401);
    };
    // Four of the controller's half-second intervals of each: healthy, then failing.
    for (const ok of [true, false]) {
      const until = Date.now() + 2500;
      await drive(forged(ok), async () => Date.now() > until);
      expect(await adaptiveMoves(open)).toEqual([]);
    }
    // Real failures, reported with the admin's credential, do cut it.
    await drive(
      async () => {
        const r = await call(open.url, '/v1/outcomes', failures('db:orders', 50), { token: TOKEN });
        expect(r.status).toBe(200);
      },
      async () => (await adaptiveMoves(open)).length > 0,
    );
    expect((await adaptiveMoves(open))[0].reason).toMatch(/downstream error ratio/);
  }, 90_000);
});
