/**
 * Normal clients under abuse: `sluice serve`, on its embedded store and on Redis, answers a
 * closed-loop normal client (checks over 100 keys, `NORMAL_IN_FLIGHT` in flight, from 127.0.0.1)
 * alone, then beside a client flooding batches of `FLOOD_BATCH` new keys from another address
 * (127.0.0.2), then beside every attack at once from that address: the flood, stalled bodies,
 * garbage requests and a new Envoy limit override per gRPC call. Reported: the normal client's
 * decisions/s, p50 and p99 in each phase, and the ratios (abused / quiet); the target (SPEC's
 * fair service per client) is judged beside the batch flood. Correctness under the same attacks
 * is asserted by test/integration/abuse-soak.test.ts, fairness as a behaviour by
 * abuse-fairness.test.ts; this part only measures.
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { FLOOD_BATCH, FLOOD_IN_FLIGHT, HOSTILE_ADDRESS, STALLED, type Attacks } from './abuse-hostile.js';
import { trackChild } from './service-children.js';
import { percentile } from './service-measure.js';
import { SERVICE_RULES, startService, type ServiceStore } from './service-server.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

const NORMAL_IN_FLIGHT = 4;
const NORMAL_KEYS = 100;
/** The share of its quiet rate the normal client keeps beside the batch flood, at least. */
export const FAIRNESS_TARGET = 0.5;

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
function hostile(url: string, grpcTarget: string, attacks: Attacks): { stop(): Promise<void> } {
  const child = trackChild(fork(fileURLToPath(new URL('./abuse-hostile.js', import.meta.url)), [url, grpcTarget, attacks]));
  const exited = once(child, 'exit');
  return {
    stop: async () => {
      child.send('stop');
      await exited;
    },
  };
}

interface Phases {
  readonly quiet: Phase;
  readonly flood: Phase;
  readonly all: Phase;
}

/** The phases on one store: the quiet one, beside the batch flood, beside every attack. */
async function abusePhases(store: ServiceStore, phaseMs: number): Promise<Phases> {
  const service = await startService(store);
  const pool = new Pool(service.url, { connections: NORMAL_IN_FLIGHT });
  const beside = async (attacks: Attacks) => {
    const attack = hostile(service.url, service.grpcTarget, attacks);
    try {
      await sleep(1000);
      return await normalPhase(pool, phaseMs);
    } finally {
      await attack.stop();
    }
  };
  try {
    await normalPhase(pool, Math.min(1000, phaseMs)); // warm-up
    const quiet = await normalPhase(pool, phaseMs);
    const flood = await beside('flood');
    const all = await beside('all');
    return { quiet, flood, all };
  } finally {
    await pool.close();
    await service.stop();
  }
}

/** Runs the phases of `phaseMs` each on the embedded store and on Redis, and returns the table. */
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
    const { quiet, flood, all } = await abusePhases(store, phaseMs);
    const row = (phase: string, p: Phase) => [
      name,
      phase,
      fmtInt(p.perSecond),
      fmt(p.p50Ms, 2),
      fmt(p.p99Ms, 2),
      fmtInt(p.errors),
      '',
    ];
    const ratio = (phase: string, p: Phase, verdict: string) => [
      name,
      phase,
      fmtRatio(p.perSecond / quiet.perSecond),
      fmtRatio(p.p50Ms / quiet.p50Ms),
      fmtRatio(p.p99Ms / quiet.p99Ms),
      '',
      verdict,
    ];
    const fair = flood.perSecond / quiet.perSecond >= FAIRNESS_TARGET && flood.errors === 0;
    rows.push(
      row('quiet', quiet),
      row('beside the batch flood', flood),
      ratio('batch flood / quiet', flood, `>= ${FAIRNESS_TARGET}x: ${fair ? 'PASS' : 'MISS'}`),
      row('beside every attack', all),
      ratio('every attack / quiet', all, 'reported'),
    );
  }
  return {
    title: `Normal clients under abuse: sluice serve, ${NORMAL_IN_FLIGHT} normal checks in flight`,
    header: ['store', 'phase', 'decisions/s', 'p50 ms', 'p99 ms', 'errors', 'target'],
    rows,
    notes: [
      `Abuse from ${HOSTILE_ADDRESS}. The batch flood: ${FLOOD_IN_FLIGHT} connections of ${FLOOD_BATCH}-key batches of new keys.`,
      `Every attack: the flood, up to ${STALLED} stalled bodies, a garbage request every 10 ms and a new Envoy limit override`,
      'on every gRPC call (one at a time), all at once.',
    ],
  };
}
