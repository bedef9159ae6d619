/* eslint-disable @typescript-eslint/no-unsafe-call --
   the assertions read parsed JSON answers dynamically */
import { RemoteLimiter } from '@sluice/client';
import { cohortAt } from '@sluice/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { deleteRedisKeys } from '../../../test/sluice-serve.js';
import {
  admin,
  call,
  FAST_ROLLOUT,
  TOKEN,
  runCli,
  scratch,
  type ServerProcess,
  spawnServer,
  eventually,
  writeRules,
} from './support.js';

// Per order key: 100 an hour in force, and a candidate that allows 1 (the too-tight limit).
const RULES = (limit: number) => `
resources:
  orders:
    limits: { algorithm: fixed-window, limit: ${limit}, windowMs: 3600000 }
  search:
    limits: { algorithm: fixed-window, limit: 100, windowMs: 3600000 }
`;

/** Two checks of each key, spread over the servers; the answers by key (and each first answer's `cohort` into `cohorts`). */
async function twice(
  servers: readonly ServerProcess[],
  keys: readonly string[],
  resource = 'orders',
  cohorts?: Map<string, unknown>,
) {
  const out = new Map<string, boolean[]>();
  for (const round of [0, 1]) {
    const answers = await Promise.all(
      keys.map((key, i) => call(servers[(i + round) % servers.length]!.url, '/v1/check', { resource, key })),
    );
    answers.forEach((a, i) => {
      expect(a.status).toBe(200);
      out.set(keys[i]!, [...(out.get(keys[i]!) ?? []), a.json.allowed === true]);
      if (round === 0) cohorts?.set(keys[i]!, a.json.cohort);
    });
  }
  return out;
}

describe('gradual rollout across sluice serve processes on one Redis', () => {
  const tmp = scratch();
  const prefix = randomPrefix('rollout');
  let servers: ServerProcess[] = [];
  let candidate: string;

  beforeAll(async () => {
    const rules = writeRules(tmp.dir, RULES(100));
    candidate = writeRules(tmp.dir, RULES(1), 'candidate.yaml');
    servers = await Promise.all(
      [0, 1].map(() => spawnServer(['--rules', rules, '--redis', redisUrl(), '--redis-prefix', prefix, ...FAST_ROLLOUT])),
    );
  });
  afterAll(async () => {
    const codes = await Promise.all(servers.map((s) => s.stop()));
    expect(codes).toEqual(servers.map(() => 0));
    await deleteRedisKeys(prefix);
    tmp.remove();
  });

  it('splits keys the same way on every server, and a too-tight candidate is rolled back automatically', async () => {
    const start = await admin(servers[0]!, '/rollout', {
      text: RULES(1),
      file: 'candidate.yaml',
      author: 'ana',
      reason: 'orders down to 1 an hour',
      // A long hold: only the judge can end this rollout. The judge needs 50 decisions a cohort.
      steps: [{ percent: 50, holdMs: 3_600_000 }],
      thresholds: { minCalls: 50 },
    });
    expect(start.status).toBe(201);
    const id = start.json.rollout.id as string;
    expect(start.json.rollout.resources).toEqual(['orders']);
    // Both servers split keys before the traffic (they read the rollout every 100 ms). The id is
    // the admin view's: the public summary leaves it out.
    await eventually(async () => {
      const r = await Promise.all(servers.map((s) => admin(s, '/rollout')));
      return r.every((x) => x.json.rollout?.id === id && x.json.percent === 50);
    });

    const keys = Array.from({ length: 200 }, (_, i) => `order-${i}`);
    const said = new Map<string, unknown>();
    const answers = await twice(servers, keys, 'orders', said);
    // Each key's second call went to the other server. A baseline key (by the same hash the
    // servers use) is admitted twice; a candidate key is denied its second call, unless the
    // judge rolled back before that call was decided.
    const cohort = (k: string) => cohortAt(50, id, 'orders', k);
    // Every decision said whose limits decided it (the first calls: no rejections yet, no rollback).
    for (const k of keys) expect(said.get(k)).toBe(cohort(k));
    for (const k of keys) {
      expect(answers.get(k)![0]).toBe(true);
      if (cohort(k) === 'baseline') expect(answers.get(k)![1]).toBe(true);
    }
    const denied = keys.filter((k) => answers.get(k)![1] === false);
    expect(denied.length).toBeGreaterThan(0);
    expect(keys.filter((k) => cohort(k) === 'candidate').length).toBeGreaterThan(50);
    // Resources the candidate leaves alone are not split.
    const search = await twice(servers, keys.slice(0, 20), 'search');
    for (const a of search.values()) expect(a).toEqual([true, true]);

    // Each server reads the rollout every 100 ms: wait until both have seen the rollback.
    await eventually(async () => {
      const r = await Promise.all(servers.map((s) => admin(s, '/rollout')));
      return r.every((x) => x.json.rollout?.status === 'rolled_back');
    }, 30_000);
    const state = (await admin(servers[0]!, '/rollout')).json.rollout;
    expect(state.note).toMatch(
      /^orders: candidate rejection ratio \d+\.\d% \(\d+\/\d+\) against 0\.0% for the baseline, over the allowed rise of 10\.0% \(decisions counted by [12] servers? in \d+\.\d s of step 1\)$/,
    );
    const history = (await admin(servers[0]!, '/rules/history')).json.versions;
    expect(history[0]).toMatchObject({ version: state.rollbackVersion, author: 'auto-rollback', rolledBackFrom: 1 });
    expect(history[0].reason).toBe(state.note);
    expect(history.filter((v: { author: string }) => v.author === 'auto-rollback')).toHaveLength(1);

    // Every key is back on the version in force: a candidate key is admitted again, on both servers.
    await eventually(async () => {
      const r = await Promise.all(servers.map((s) => call(s.url, '/v1/rollout')));
      return r.every((x) => x.json.rollout?.status === 'rolled_back' && x.json.rollout.percent === 0);
    });
    for (const s of servers) {
      const a = await call(s.url, '/v1/check', { resource: 'orders', key: denied[0] });
      expect(a.json.allowed).toBe(true);
      // Nothing splits the resource any more: no cohort; the version header names the rollback's.
      expect(a.json.cohort).toBeUndefined();
      expect(a.headers.get('sluice-rules-version')).toBe(String(state.rollbackVersion));
    }
    // The public summary tells the measured reason, not who started the rollout or why.
    const summary = (await call(servers[0]!.url, '/v1/rollout')).json.rollout;
    expect(summary).toMatchObject({ status: 'rolled_back', note: state.note });
    expect(summary.author ?? summary.reason ?? summary.candidate ?? summary.id).toBeUndefined();
    const status = await runCli(['status', '--once', '--interval', '100', '--server', servers[0]!.url]);
    // Under the title and the health line.
    expect(status.stdout.split('\n')[2]).toMatch(
      /^rollout rolled_back: v1 -> not applied {2}\(orders: candidate rejection ratio/,
    );
    const metrics = await Promise.all(servers.map((s) => call(s.url, '/metrics')));
    const rollbacks = metrics.map((m) => Number(/^sluice_rollout_rollbacks_total (\d+)$/m.exec(m.json as string)?.[1] ?? 0));
    // Decided once, by the server holding the leadership.
    expect(rollbacks.reduce((a, b) => a + b, 0)).toBe(1);
    for (const m of metrics) expect(m.json).toMatch(/^sluice_rollout_ratio 0$/m);
  });

  it('ramps on its own, is paused, resumed and promoted from the CLI, and records the candidate once', async () => {
    const before = (await admin(servers[0]!, '/rules')).json.version as number;
    const env = { SLUICE_SERVER: servers[1]!.url, SLUICE_ADMIN_TOKEN: TOKEN };
    const started = await runCli(
      [
        'rules',
        'rollout',
        'start',
        candidate,
        '--reason',
        'try the new limit',
        '--author',
        'ana',
        '--steps',
        '1:0,10:3600000',
        '--watch-ms',
        '200',
      ],
      env,
    );
    expect(started.stderr).toBe('');
    expect(started.stdout).toMatch(/^started rollout \S+ {2}running/);
    // The first step holds 0 ms: the decider moves to 10 % and holds there.
    await eventually(async () => (await admin(servers[0]!, '/rollout')).json.rollout?.step === 1);
    await eventually(async () => (await call(servers[0]!.url, '/metrics')).json.match(/^sluice_rollout_ratio 0.1$/m) !== null);
    const metrics = (await call(servers[0]!.url, '/metrics')).json as string;
    expect(metrics).toMatch(new RegExp(`^sluice_rules_version\\{cohort="baseline"\\} ${before}$`, 'm'));
    expect(metrics).toMatch(new RegExp(`^sluice_rules_version\\{cohort="candidate"\\} ${before + 1}$`, 'm'));

    // A remote client's checks are split by the service the same way.
    const id = (await admin(servers[0]!, '/rollout')).json.rollout.id as string;
    const remote = new RemoteLimiter({ url: servers[0]!.url });
    try {
      // The rollout id is random, so the keys on each side are picked by the servers' own hash.
      const pool = Array.from({ length: 1000 }, (_, i) => `remote-${i}`);
      const cand = pool.find((k) => cohortAt(10, id, 'orders', k) === 'candidate')!;
      const base = pool.find((k) => cohortAt(10, id, 'orders', k) === 'baseline')!;
      const seen: boolean[] = [];
      for (const key of [cand, cand, base, base]) seen.push((await remote.try('orders', { key })).allowed);
      expect(seen).toEqual([true, false, true, true]);
    } finally {
      await remote.close();
    }

    const paused = await runCli(['rules', 'rollout', 'pause', '--reason', 'look at the graphs'], env);
    expect(paused.stdout).toMatch(/paused .* step 2\/2 at 10%/s);
    expect((await runCli(['rules', 'rollout', 'resume', '--reason', 'fine'], env)).stdout).toMatch(/running/);
    const status = await runCli(['rules', 'rollout', 'status'], env);
    expect(status.stdout).toMatch(/resources: orders/);
    const promoted = await runCli(['rules', 'rollout', 'promote', '--reason', 'looks good'], env);
    expect(promoted.stdout).toMatch(/watching {2}v\d+ -> v\d+/);
    // Watched for 200 ms, then completed by the decider alone.
    await eventually(async () => (await admin(servers[0]!, '/rollout')).json.rollout?.status === 'completed');
    const history = (await admin(servers[0]!, '/rules/history')).json.versions;
    expect(history[0]).toMatchObject({ version: before + 1, author: 'ana' });
    expect(history.filter((v: { version: number }) => v.version > before)).toHaveLength(1);
    // The candidate is the version in force everywhere: one order per key an hour.
    await eventually(async () =>
      (await Promise.all(servers.map((s) => call(s.url, '/v1/stats')))).every((r) => r.json.version === before + 1),
    );
    const answers = await twice(servers, ['fresh-1', 'fresh-2']);
    for (const a of answers.values()) expect(a).toEqual([true, false]);
    // An action on a finished rollout is a conflict.
    const pause = await admin(servers[0]!, '/rollout/pause', { author: 'ana', reason: 'late' });
    expect(pause.status).toBe(409);
    expect(pause.json.error.code).toBe('SLUICE_ERR_ROLLOUT_CONFLICT');
  });
});
