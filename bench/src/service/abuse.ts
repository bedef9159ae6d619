/**
 * Normal clients under abuse: `sluice serve` on its embedded store answers a paced normal client
 * (checks over 100 keys, `NORMAL_IN_FLIGHT` in flight) alone, then while hostile clients flood it
 * with batches of new keys (the key table's bound), stalled bodies, garbage requests and a new
 * Envoy limit override per gRPC call. Reported: the normal client's decisions/s, p50 and p99 in
 * both phases, and the ratios (abused / quiet). Correctness under the same attacks is asserted by
 * test/integration/abuse-soak.test.ts; this part only measures.
 */
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import * as grpc from '@grpc/grpc-js';
import { Pool } from 'undici';
import { PROTO_DIR, loadRlsMethod } from './service-load.js';
import { percentile } from './service-measure.js';
import { SERVICE_RULES, startService } from './service-server.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

const NORMAL_IN_FLIGHT = 4;
const NORMAL_KEYS = 100;
const FLOOD_IN_FLIGHT = 8;
const FLOOD_BATCH = 50;
const STALLED = 200;

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

/** The hostile clients, until `stop` is set; resolves once they have all ended. */
function hostile(url: string, grpcTarget: string, stop: { done: boolean }): Promise<unknown> {
  const { port } = new URL(url);
  const flood = new Pool(url, { connections: FLOOD_IN_FLIGHT });
  let i = 0;
  const floods = Array.from({ length: FLOOD_IN_FLIGHT }, async () => {
    while (!stop.done) {
      const items = Array.from({ length: FLOOD_BATCH }, () => ({ resource: SERVICE_RULES.resource, key: `flood-${i++}` }));
      await flood
        .request({
          path: '/v1/check',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ items }),
        })
        .then((r) => r.body.text())
        .catch(() => undefined);
    }
  });
  const sockets: Socket[] = [];
  const junk = (async () => {
    while (!stop.done) {
      if (sockets.length < STALLED) {
        const s = connect(Number(port), '127.0.0.1', () =>
          s.write('POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{'),
        );
        s.on('error', () => undefined);
        sockets.push(s);
      }
      const g = connect(Number(port), '127.0.0.1', () => g.end('GARBAGE / HTTP/9.9\r\n\r\n'));
      g.on('error', () => undefined);
      await sleep(10);
    }
  })();
  const method = loadRlsMethod(PROTO_DIR);
  const client = new grpc.Client(grpcTarget, grpc.credentials.createInsecure());
  let o = 0;
  const overrides = (async () => {
    while (!stop.done) {
      const n = o++;
      const request = {
        domain: SERVICE_RULES.domain,
        descriptors: [
          { entries: [{ key: SERVICE_RULES.descriptorKey, value: `u${n}` }], limit: { requests_per_unit: 1 + n, unit: 'HOUR' } },
        ],
      };
      await new Promise<void>((resolve) => {
        client.makeUnaryRequest(
          method.path,
          (x: object) => method.requestSerialize(x),
          (b: Buffer) => method.responseDeserialize(b),
          request,
          { deadline: Date.now() + 5000 },
          () => resolve(),
        );
      });
    }
  })();
  return Promise.all([...floods, junk, overrides]).finally(async () => {
    for (const s of sockets) s.destroy();
    client.close();
    await flood.close();
  });
}

/** Runs both phases of `phaseMs` each and returns the table. */
export async function runAbuse(phaseMs: number, progress: (line: string) => void): Promise<Table> {
  progress('normal clients under abuse...');
  const service = await startService({ kind: 'embedded' });
  const pool = new Pool(service.url, { connections: NORMAL_IN_FLIGHT });
  try {
    await normalPhase(pool, Math.min(1000, phaseMs)); // warm-up
    const quiet = await normalPhase(pool, phaseMs);
    const stop = { done: false };
    const attack = hostile(service.url, service.grpcTarget, stop);
    await sleep(500);
    const abused = await normalPhase(pool, phaseMs);
    stop.done = true;
    await attack;
    const row = (name: string, p: Phase) => [name, fmtInt(p.perSecond), fmt(p.p50Ms, 2), fmt(p.p99Ms, 2), fmtInt(p.errors)];
    return {
      title: `Normal clients under abuse: sluice serve (embedded store), ${NORMAL_IN_FLIGHT} normal checks in flight`,
      header: ['phase', 'decisions/s', 'p50 ms', 'p99 ms', 'errors'],
      rows: [
        row('quiet', quiet),
        row('under abuse', abused),
        [
          'abused / quiet',
          fmtRatio(abused.perSecond / quiet.perSecond),
          fmtRatio(abused.p50Ms / quiet.p50Ms),
          fmtRatio(abused.p99Ms / quiet.p99Ms),
          '',
        ],
      ],
      notes: [
        `Abuse: ${FLOOD_IN_FLIGHT} connections of ${FLOOD_BATCH}-key batches of new keys, up to ${STALLED} stalled bodies,`,
        'a garbage request every 10 ms, and a new Envoy limit override on every gRPC call, all at once.',
      ],
    };
  } finally {
    await pool.close();
    await service.stop();
  }
}
