/**
 * A gradual rollout of an Envoy domain's limits through the gRPC rate-limit service, on two
 * `sluice serve` processes sharing one Redis: each descriptor is decided by its cohort's version
 * on both servers alike, a too-tight candidate is rolled back by the judge, and a good one is
 * promoted to every descriptor.
 */
import { cohortAt } from '@sluice/core';
import { rolloutDomainLabel } from '@sluice/rules';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { deleteRedisKeys } from '../../../test/sluice-serve.js';
import { descriptorCohortKey } from '../src/envoy/rls.js';
import {
  admin,
  call,
  FAST_ROLLOUT,
  TOKEN,
  RlsClient,
  runCli,
  scratch,
  type ServerProcess,
  spawnServer,
  eventually,
  writeRules,
} from './support.js';

// Per client address: 100 requests an hour in force; the candidate allows `limit`.
const RULES = (limit: number) => `
resources:
  orders:
    limits: { algorithm: fixed-window, limit: 100, windowMs: 3600000 }
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: { unit: hour, requests_per_unit: ${limit} }
`;

const address = (value: string) => [{ key: 'remote_address', value }];
const cohort = (percent: number, id: string, value: string) =>
  cohortAt(percent, id, rolloutDomainLabel('edge'), descriptorCohortKey(address(value)));

describe('gradual rollout of an Envoy domain across sluice serve processes on one Redis', () => {
  const tmp = scratch();
  const prefix = randomPrefix('rollout-envoy');
  let servers: ServerProcess[] = [];
  let clients: RlsClient[] = [];

  /** One ShouldRateLimit call for `value` through server `i`: its overall code. */
  const ask = async (i: number, value: string): Promise<string> => {
    const r = await clients[i % clients.length]!.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: address(value) }] });
    expect(r.error).toBeUndefined();
    return r.overall_code as string;
  };

  /** Waits until both servers split (or stop splitting) as `check` says (the admin view: it has the id). */
  const bothSee = (check: (rollout: Record<string, unknown> | null) => boolean) =>
    eventually(async () => {
      const r = await Promise.all(servers.map((s) => admin(s, '/rollout')));
      return r.every((x) =>
        check(x.json.rollout === null ? null : { ...(x.json.rollout as Record<string, unknown>), percent: x.json.percent }),
      );
    }, 30_000);

  beforeAll(async () => {
    const rules = writeRules(tmp.dir, RULES(100));
    servers = await Promise.all(
      [0, 1].map(() => spawnServer(['--rules', rules, '--redis', redisUrl(), '--redis-prefix', prefix, ...FAST_ROLLOUT])),
    );
    clients = servers.map((s) => new RlsClient(`127.0.0.1:${s.grpcPort}`));
  });
  afterAll(async () => {
    for (const c of clients) c.close();
    const codes = await Promise.all(servers.map((s) => s.stop()));
    expect(codes).toEqual(servers.map(() => 0));
    await deleteRedisKeys(prefix);
    tmp.remove();
  });

  it('splits descriptors the same way on every server, and a too-tight candidate is rolled back', async () => {
    const start = await admin(servers[0]!, '/rollout', {
      text: RULES(1),
      file: 'candidate.yaml',
      author: 'ana',
      reason: 'edge down to 1 an hour',
      steps: [{ percent: 50, holdMs: 3_600_000 }],
      thresholds: { minCalls: 50 },
    });
    expect(start.status).toBe(201);
    const id = start.json.rollout.id as string;
    // Only the domain changed: no native resource is split.
    expect(start.json.rollout).toMatchObject({ resources: [], domains: ['edge'] });
    await bothSee((r) => r?.id === id && r.percent === 50 && (r.domains as string[] | undefined)?.[0] === 'edge');

    const values = Array.from({ length: 200 }, (_, i) => `198.51.100.${i}`);
    const answers = new Map<string, string[]>();
    // Each address twice, the second time through the other server.
    for (const round of [0, 1]) {
      const codes = await Promise.all(values.map((v, i) => ask(i + round, v)));
      codes.forEach((c, i) => answers.set(values[i]!, [...(answers.get(values[i]!) ?? []), c]));
    }
    for (const v of values) {
      expect(answers.get(v)![0]).toBe('OK');
      // A baseline address has 100 an hour; a candidate one is refused its second request,
      // unless the judge rolled the candidate back before that request was decided.
      if (cohort(50, id, v) === 'baseline') expect(answers.get(v)![1]).toBe('OK');
    }
    expect(values.filter((v) => cohort(50, id, v) === 'candidate').length).toBeGreaterThan(50);
    const refused = values.filter((v) => answers.get(v)![1] === 'OVER_LIMIT');
    expect(refused.length).toBeGreaterThan(0);
    for (const v of refused) expect(cohort(50, id, v)).toBe('candidate');

    await eventually(async () => {
      const r = await Promise.all(servers.map((s) => admin(s, '/rollout')));
      return r.every((x) => x.json.rollout?.status === 'rolled_back');
    }, 30_000);
    const state = (await admin(servers[0]!, '/rollout')).json.rollout;
    expect(state.note).toMatch(
      /^domain edge: candidate rejection ratio \d+\.\d% \(\d+\/\d+\) against 0\.0% for the baseline, over the allowed rise of 10\.0% \(decisions counted by [12] servers? in \d+\.\d s of step 1\)$/,
    );
    const history = (await admin(servers[0]!, '/rules/history')).json.versions;
    expect(history[0]).toMatchObject({ author: 'auto-rollback', rolledBackFrom: 1, reason: state.note });
    // Every address is back on the version in force, on both servers.
    await bothSee((r) => r?.status === 'rolled_back' && r.percent === 0);
    for (const i of [0, 1]) expect(await ask(i, refused[0]!)).toBe('OK');
  });

  it('shows the split domain in sluice status, and a promoted candidate decides every descriptor', async () => {
    const env = { SLUICE_SERVER: servers[1]!.url, SLUICE_ADMIN_TOKEN: TOKEN };
    const candidate = writeRules(tmp.dir, RULES(2), 'candidate.yaml');
    const started = await runCli(
      ['rules', 'rollout', 'start', candidate, '--reason', 'edge to 2 an hour', '--author', 'ana', '--steps', '10:3600000'],
      env,
    );
    expect(started.stderr).toBe('');
    expect(started.stdout).toMatch(/envoy domains: edge/);
    await bothSee((r) => r?.status === 'running' && r.percent === 10);
    const status = await runCli(['status', '--once', '--interval', '100', '--server', servers[0]!.url]);
    expect(status.stdout).toMatch(/^rollout running: baseline v\d+ \/ candidate 10% of keys of domain edge {2}step 1\/1/m);
    // The id is the admin's (and data-plane clients'): the public summary leaves it out.
    const id = (await admin(servers[0]!, '/rollout')).json.rollout.id as string;
    const pool = Array.from({ length: 1000 }, (_, i) => `203.0.113.${i % 250}-${i}`);
    const onCandidate = pool.find((v) => cohort(10, id, v) === 'candidate')!;
    // The candidate's 2 an hour, whichever server is asked.
    expect([await ask(0, onCandidate), await ask(1, onCandidate), await ask(0, onCandidate)]).toEqual(['OK', 'OK', 'OVER_LIMIT']);

    const promoted = await runCli(['rules', 'rollout', 'promote', '--reason', 'looks good'], env);
    const version = Number(/watching {2}v\d+ -> v(\d+)/.exec(promoted.stdout)?.[1]);
    expect(version).toBeGreaterThan(1);
    await eventually(async () =>
      (await Promise.all(servers.map((s) => call(s.url, '/v1/stats')))).every((r) => r.json.version === version),
    );
    // Every address now has 2 an hour, on both servers.
    const fresh = pool.find((v) => cohort(10, id, v) === 'baseline')!;
    expect([await ask(1, fresh), await ask(0, fresh), await ask(1, fresh)]).toEqual(['OK', 'OK', 'OVER_LIMIT']);
  });
});
