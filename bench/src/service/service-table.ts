import { cpus } from 'node:os';
import { SERVICE_POLICY } from './service-server.js';
import type { ServiceCell, ServiceSettings } from './service.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

const NA = 'n/a';
const cores = (n: number) => (Number.isFinite(n) ? fmt(n, 2) : NA);

/** The table of the service part. */
export function serviceTable(cells: readonly ServiceCell[], s: ServiceSettings): Table {
  const peer = (c: ServiceCell) => cells.find((x) => x.store === c.store && x.api === 'in-process');
  return {
    title: 'Service: HTTP and gRPC through sluice serve, against Limiter.try in one process',
    header: [
      'store',
      'API',
      'load',
      'calls in flight',
      'items/call',
      'decisions/s',
      'vs in-process',
      'p50 us',
      'p99 us',
      'server CPU',
      'server us/dec',
      'load CPU',
      'Redis CPU',
      'other CPU',
      'server counted',
      'fallbacks',
      'errors',
    ],
    align: ['left', 'left', 'left'],
    rows: cells.map((c) => [
      c.store,
      c.api,
      c.load,
      fmtInt(c.callsInFlight),
      String(c.itemsPerCall),
      fmtInt(c.decisionsPerSec),
      c.api === 'in-process' ? '' : fmtRatio(c.decisionsPerSec / (peer(c)?.decisionsPerSec ?? NaN)),
      fmtInt(c.p50),
      fmtInt(c.p99),
      cores(c.serverCores),
      fmt((c.serverCores / c.decisionsPerSec) * 1e6, 1),
      c.api.startsWith('in-process') ? '(same)' : cores(c.loadCores),
      cores(c.redisCores),
      cores(c.otherCores),
      Number.isFinite(c.serverCounted) ? fmt(c.serverCounted, 3) : NA,
      fmtInt(c.fallbacks),
      c.errors === 0 ? '0' : `${fmtInt(c.errors)} (${c.firstError ?? '?'})`.slice(0, 60),
    ]),
    notes: [
      `This machine has ${cpus().length} cores, shared by the server (one Node process), the load, Redis and anything else`,
      'running. The CPU columns are cores busy over the measured window (1.00 = one core): "server" is the sluice serve',
      'process (in-process rows: the bench process, which is its own load), "load" wrk or the Node load processes,',
      '"Redis" redis-server, "other" the rest of the machine (/proc/stat less those). "server us/dec" is server CPU time',
      'per decision: what decoding, deciding and encoding one decision costs the server, whatever the load.',
      `Each cell: ${s.warmupMs} ms warm-up, then ${s.measureMs} ms measured; keys cycle through ${fmtInt(s.keys)} keys; one`,
      `limit for every API: a fixed window of ${fmtInt(SERVICE_POLICY.limit)}/s (every call is allowed, decided in full).`,
      'HTTP: POST /v1/check, one item per call or { items: [...] } (decisions/s counts items); gRPC: ShouldRateLimit',
      'with one descriptor. Latency is per call (a batch call answers all its items). "vs in-process" divides by the',
      'in-process row of the same store ("in-process + metrics": the same with the Prometheus observer sluice serve',
      'decides with, so its ratio is what counting and timing decisions costs). "server counted": decisions the',
      "server's /v1/stats grew by over the run (Node load: warm-up included), over those the clients completed (1.000;",
      'wrk: a little more, as it drops the calls in flight when its time is up); "fallbacks": decisions the',
      'store-failure policy made in the same span (a Redis call over the 50 ms store timeout).',
    ],
  };
}
