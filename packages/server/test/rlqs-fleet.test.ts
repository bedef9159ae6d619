import { Cluster, Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisClusterNodes, redisUrl } from '../../../test/env.js';
import { SimEnvoy, mostInWindow, type SimBucket } from './rlqs-client.js';
import { admin, call, deleteKeys, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

// Needs Redis and Redis Cluster (SLUICE_REDIS_URL, SLUICE_REDIS_CLUSTER_NODES). Envoy's rate limit quota service on two `sluice serve`
// sharing one Redis: five simulated Envoys with demand 1:1:1:3:10 spread over both, an exact HTTP
// caller, one far over the limit, a bursty one, an Envoy joining and one leaving, a rule change,
// and one server killed (its Envoys reconnect to the other). One limit holds over all of it (docs/quota-service.md, "The bound").

const LIMIT = 300;
const LOWER = 150;
const WINDOW_MS = 3000;
const INTERVAL_MS = 500;
const rules = (limit: number) => `
resources:
  api:fleet:
    limits: { algorithm: sliding-window, limit: ${limit}, windowMs: ${WINDOW_MS} }
quota:
  - domain: edge
    buckets:
      - bucket: { name: fleet }
        resource: api:fleet
`;

/** An Envoy of the run: its stream (replaced when it reconnects), its bucket, its demand. */
interface Gateway {
  envoy: SimEnvoy;
  readonly bucket: SimBucket;
  rate: number;
  offered: number;
  /** Requests offered and admitted in the phase being measured. */
  phaseOffered: number;
  phaseAdmitted: number;
  live: boolean;
}

/** The store both servers share: its flags, and a client to clear the run's keys with. */
const STORES = [
  { name: 'Redis', flags: () => ['--redis', redisUrl()], client: () => new Redis(redisUrl()) },
  {
    name: 'Redis Cluster',
    flags: () => [
      '--redis-cluster',
      redisClusterNodes()
        .map((n) => `${n.host}:${n.port}`)
        .join(','),
    ],
    client: () => new Cluster(redisClusterNodes()),
  },
] as const;

describe.each(STORES)('RLQS across two servers on $name', (store) => {
  const tmp = scratch();
  const prefix = randomPrefix('rlqs-fleet');
  let a: ServerProcess;
  let b: ServerProcess;
  const http: number[] = [];

  beforeAll(async () => {
    const file = writeRules(tmp.dir, rules(LIMIT));
    const flags = ['--rules', file, ...store.flags(), '--redis-prefix', prefix, '--store-timeout-ms', '2000'];
    [a, b] = await Promise.all([spawnServer(flags), spawnServer(flags)]);
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop('SIGKILL')]);
    const client = store.client();
    await deleteKeys(client, prefix);
    client.disconnect();
    tmp.remove();
  });

  it('shares one limit by demand over both servers, through skew, bursts, a join, a leave, a rule change and a killed server', async () => {
    const target = (s: ServerProcess) => `127.0.0.1:${s.grpcPort}`;
    const gateways: Gateway[] = [];
    const join = (server: ServerProcess, rate: number): Gateway => {
      const envoy = new SimEnvoy(target(server), 'edge');
      const g: Gateway = {
        envoy,
        bucket: envoy.bucket(1, { name: 'fleet' }),
        rate,
        offered: 0,
        phaseOffered: 0,
        phaseAdmitted: 0,
        live: true,
      };
      gateways.push(g);
      return g;
    };
    const startPhase = () => {
      for (const g of gateways) {
        g.phaseOffered = 0;
        g.phaseAdmitted = 0;
      }
    };
    // Demand is owed by wall time, each Envoy reports every INTERVAL_MS, and an exact HTTP caller
    // asks 5 times a second. A turn of the loop that comes late (a busy machine) offers what fell
    // due since the last at the times it fell due, as the Envoy would have met it, not as one burst
    // beyond what a bucket sized for the demand holds.
    const drive = async (ms: number) => {
      const owed = new Map<Gateway, number>();
      const started = Date.now();
      let last = started;
      let httpOwed = 0;
      while (Date.now() - started < ms) {
        const now = Date.now();
        const from = last;
        const elapsed = now - last;
        last = now;
        for (const g of gateways) {
          if (!g.live) continue;
          const before = owed.get(g) ?? 0;
          let o = before + (g.rate * elapsed) / 1000;
          for (let k = 1; o >= 1; k++, o--) {
            const due = Math.min(now, from + ((k - before) * 1000) / g.rate);
            g.offered++;
            g.phaseOffered++;
            if (g.envoy.request(g.bucket, due)) g.phaseAdmitted++;
          }
          owed.set(g, o);
          g.envoy.tick(now, INTERVAL_MS);
        }
        httpOwed += (5 * elapsed) / 1000;
        if (httpOwed >= 1) {
          httpOwed--;
          const r = await call(a.url, '/v1/check', { resource: 'api:fleet' });
          if (r.json.allowed === true) http.push(Date.now());
        }
        await sleep(20);
      }
    };
    const admissions = (from = 0) =>
      [...gateways.flatMap((g) => g.bucket.admitted), ...http].filter((t) => t >= from).sort((x, y) => x - y);
    const figures: Record<string, unknown> = {};

    try {
      // Phase 1: demand 3, 3, 3, 9 and 30 a second (1:1:3 and 10), 48 in all, well within what
      // Envoys can take of 100 a second; Envoys 0, 2 and 4 on server A, 1 and 3 on B.
      const rates = [3, 3, 3, 9, 30];
      const envoys = rates.map((r, i) => join(i % 2 === 0 ? a : b, r));
      await drive(3000); // every Envoy subscribed and assigned
      startPhase();
      await drive(6000);
      figures.phase1 = envoys.map((g) => [g.phaseAdmitted, g.phaseOffered]);
      figures.denied1 = envoys.map((g) => ({ ...g.bucket.denied })); // since the start, by cause
      for (const g of envoys) {
        expect(g.bucket.assignments).toBeGreaterThan(3);
        expect(g.phaseAdmitted, JSON.stringify(figures)).toBeGreaterThanOrEqual(0.8 * g.phaseOffered);
      }
      // Shares follow demand: the 10 admits well over the 3, and the 3 over each 1.
      expect(envoys[4]!.phaseAdmitted).toBeGreaterThan(2 * envoys[3]!.phaseAdmitted);
      for (const small of envoys.slice(0, 3)) expect(envoys[3]!.phaseAdmitted).toBeGreaterThan(2 * small.phaseAdmitted);

      // Phase 2: the 10 asks 300 a second, far beyond the limit; a bursty Envoy on B asks 150 a
      // second every other second; a seventh joins on A, and Envoy 0 leaves. The small ones keep
      // most of their demand.
      envoys[4]!.rate = 300;
      const bursty = join(b, 150);
      const toggle = setInterval(() => (bursty.rate = bursty.rate === 0 ? 150 : 0), 1000);
      startPhase();
      try {
        await drive(2000);
        const joined = join(a, 3);
        await drive(2000);
        envoys[0]!.live = false;
        envoys[0]!.envoy.close();
        await drive(4000);
        figures.phase2 = gateways.map((g) => [g.phaseAdmitted, g.phaseOffered]);
        expect(joined.bucket.assignments).toBeGreaterThan(0);
        expect(joined.phaseAdmitted).toBeGreaterThanOrEqual(0.5 * joined.phaseOffered);
        expect(bursty.phaseAdmitted).toBeGreaterThan(0);
      } finally {
        clearInterval(toggle);
      }
      bursty.live = false;
      bursty.envoy.close();
      for (const g of [envoys[1]!, envoys[2]!]) expect(g.phaseAdmitted).toBeGreaterThanOrEqual(0.5 * g.phaseOffered);
      expect(envoys[4]!.phaseAdmitted).toBeGreaterThan(envoys[3]!.phaseAdmitted);

      // Phase 3: server B is killed; its Envoys keep their assignments until these expire, and
      // reconnect to A, which serves them.
      await b.stop('SIGKILL');
      const killedAt = Date.now();
      startPhase();
      for (const g of [envoys[1]!, envoys[3]!]) {
        await g.envoy.ended;
        g.envoy.close();
        const envoy = new SimEnvoy(target(a), 'edge');
        envoy.adopt(g.bucket);
        g.envoy = envoy;
      }
      const assignedBefore = [envoys[1]!, envoys[3]!].map((g) => g.bucket.assignments);
      await drive(8000);
      figures.phase3 = gateways.map((g) => [g.phaseAdmitted, g.phaseOffered]);
      figures.assigned3 = [envoys[1]!, envoys[3]!].map((g, i) => [assignedBefore[i], g.bucket.assignments]);
      for (const [i, g] of [envoys[1]!, envoys[3]!].entries()) {
        expect(g.bucket.assignments).toBeGreaterThan(assignedBefore[i]! + 3);
        expect(g.phaseAdmitted).toBeGreaterThan(0);
      }
      // What B held is not lost: once its reservations' holds and a window have passed, they
      // count no more, and the Envoys now on A take the limit again.
      const changedAt = Date.now();
      const afterKill = mostInWindow(
        admissions(killedAt + 1000 + WINDOW_MS).filter((t) => t < changedAt),
        WINDOW_MS,
      );
      figures.afterKill = afterKill;

      // Phase 4: the limit is lowered on A's admin API; assignments follow it.
      expect((await admin(a, '/rules', { text: rules(LOWER), author: 'ops', reason: 'lower' })).status).toBe(201);
      startPhase();
      await drive(8000);
      figures.phase4 = gateways.map((g) => [g.phaseAdmitted, g.phaseOffered]);

      const most = mostInWindow(admissions(), WINDOW_MS);
      // Once the old assignments and reservations are past (a hold and a window after the change).
      const mostLowered = mostInWindow(admissions(changedAt + 1000 + WINDOW_MS), WINDOW_MS);
      figures.most = most;
      figures.mostLowered = mostLowered;

      // The bound: Envoys and the HTTP caller together admit at most the limit in any window,
      // plus what Envoys admitted while an assignment was replaced (charged at their next
      // report); generously on a shared machine, a quarter of the limit more.
      expect(most).toBeLessThanOrEqual(1.25 * LIMIT);
      expect(mostLowered).toBeLessThanOrEqual(1.25 * LOWER);
      // And the limits were used: more than a third of each, after the kill and after the change.
      expect(afterKill).toBeGreaterThan(LIMIT / 3);
      expect(mostLowered).toBeGreaterThan(LOWER / 3);
    } finally {
      if (process.env.SLUICE_TEST_PRINT) console.log(JSON.stringify(figures));
      for (const g of gateways) g.envoy.close();
    }
  });
});
