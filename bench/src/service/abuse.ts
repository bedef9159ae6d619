/**
 * Normal clients under abuse: `sluice serve`, on its embedded store and on Redis, answers a
 * closed-loop normal client (checks over 100 keys, `NORMAL_IN_FLIGHT` in flight, from 127.0.0.1)
 * alone, then while hostile clients from another address (127.0.0.2) flood it with batches of
 * `FLOOD_BATCH` new keys, stalled bodies, garbage requests and a new Envoy limit override per
 * gRPC call. Reported: the normal client's decisions/s, p50 and p99 in both phases, and the
 * ratios (abused / quiet). Correctness under the same attacks is asserted by
 * test/integration/abuse-soak.test.ts, fairness as a behaviour by abuse-fairness.test.ts; this
 * part only measures.
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { FLOOD_BATCH, FLOOD_IN_FLIGHT, HOSTILE_ADDRESS, STALLED } from './abuse-hostile.js';
import { trackChild } from './service-children.js';
import { percentile } from './service-measure.js';
import { SERVICE_RULES, startService, type ServiceStore } from './service-server.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

const NORMAL_IN_FLIGHT = 4;
const NORMAL_KEYS = 100;

interface Phase {
  readonly decisions: number;
  readonly perSecond: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly errors: number;
}

/** The normal client: closed loop of single checks for `ms`. */
async function normalPhase(pool: Pool, ms: number): Promise<Phase> {
  const latencies: number[] = [];
  let errors = 0;
  let n = 0;
  const end = performance.now() + ms;
  await Promise.all(
    Array.from({ length: NORMAL_IN_FLIGHT }, async () => {
      while (performance.now() < end) {
        const body = JSON.stringify({ resource: SERVICE_RULES.resource, key: `normal-${n++ % NORMAL_KEYS}` });
        const t0 = performance.now();
        try {
          const res = await pool.request({
            path: '/v1/check',
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body,
          });
          await res.body.text();
          if (res.statusCode === 200) latencies.push(performance.now() - t0);
          else errors++;
        } catch {
          errors++;
        }
      }
    }),
  );
  latencies.sort((a, b) => a - b);
  return {
    decisions: latencies.length,
    perSecond: latencies.length / (ms / 1000),
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    errors,
  };
}

/**
 * The hostile clients, in a process of their own (as attackers are: their own CPU, not the
 * normal client's event loop), until stopped; resolves once it has exited.
 */
function hostile(url: string, grpcTarget: string): { stop(): Promise<void> } {
  const child = trackChild(fork(fileURLToPath(new URL('./abuse-hostile.js', import.meta.url)), [url, grpcTarget]));
  const exited = once(child, 'exit');
  return {
    stop: async () => {
      child.send('stop');
      await exited;
    },
  };
}

/** Both phases on one store: the quiet one, then the one beside the hostile clients. */
async function abusePhases(store: ServiceStore, phaseMs: number): Promise<{ quiet: Phase; abused: Phase }> {
  const service = await startService(store);
  const pool = new Pool(service.url, { connections: NORMAL_IN_FLIGHT });
  try {
    await normalPhase(pool, Math.min(1000, phaseMs)); // warm-up
    const quiet = await normalPhase(pool, phaseMs);
    const attack = hostile(service.url, service.grpcTarget);
    await sleep(1000);
    const abused = await normalPhase(pool, phaseMs);
    await attack.stop();
    return { quiet, abused };
  } finally {
    await pool.close();
    await service.stop();
  }
}

/** Runs both phases of `phaseMs` each on the embedded store and on Redis, and returns the table. */
export async function runAbuse(
  phaseMs: number,
  redisUrl: string,
  runId: string,
  progress: (line: string) => void,
): Promise<Table> {
  const rows: string[][] = [];
  const stores: [string, ServiceStore][] = [
    ['embedded', { kind: 'embedded' }],
    ['Redis', { kind: 'redis', url: redisUrl, prefix: `sluice-bench:${runId}:abuse:` }],
  ];
  for (const [name, store] of stores) {
    progress(`normal clients under abuse (${name})...`);
    const { quiet, abused } = await abusePhases(store, phaseMs);
    const row = (phase: string, p: Phase) => [
      name,
      phase,
      fmtInt(p.perSecond),
      fmt(p.p50Ms, 2),
      fmt(p.p99Ms, 2),
      fmtInt(p.errors),
    ];
    rows.push(row('quiet', quiet), row('under abuse', abused), [
      name,
      'abused / quiet',
      fmtRatio(abused.perSecond / quiet.perSecond),
      fmtRatio(abused.p50Ms / quiet.p50Ms),
      fmtRatio(abused.p99Ms / quiet.p99Ms),
      '',
    ]);
  }
  return {
    title: `Normal clients under abuse: sluice serve, ${NORMAL_IN_FLIGHT} normal checks in flight`,
    header: ['store', 'phase', 'decisions/s', 'p50 ms', 'p99 ms', 'errors'],
    rows,
    notes: [
      `Abuse from ${HOSTILE_ADDRESS}: ${FLOOD_IN_FLIGHT} connections of ${FLOOD_BATCH}-key batches of new keys, up to ${STALLED} stalled bodies,`,
      'a garbage request every 10 ms, and a new Envoy limit override on every gRPC call, all at once.',
    ],
  };
}
