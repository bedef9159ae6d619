/**
 * The service-tls part: what TLS costs per decision. Two `sluice serve` on the same Redis with the
 * same Envoy YAML, one in clear and one serving TLS (`--tls-cert`, `--tls-key`, a certificate made
 * by openssl for the run), loaded alike: ghz for gRPC `ShouldRateLimit` (`--cacert` for the TLS
 * one), wrk for HTTP `/v1/check` (https for the TLS one). Each cell runs the two one after the
 * other, in alternating order, `rounds` times; the medians, their ratios, and the server CPU per
 * decision in each, whose difference is what TLS costs. Each load holds its connections for the
 * whole run, so this is the steady state (record encryption), not the handshake.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeTempDir, removeTempDir } from './service-children.js';
import { runGhz, runWrkBodies, sluiceCheckBody, type LoadResult, type LoadRun } from './service-peers-load.js';
import { clockTicksPerSec, figures, measure, PEER_RESOURCE, PEER_YAML, type PeerFigures } from './service-peers.js';
import { cacheDir, findOrBuild, findWrkBinary } from './service-peers-tools.js';
import { startService, type ServiceProcess } from './service-server.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

/** How the part runs. */
export interface TlsSettings {
  readonly runId: string;
  readonly redisUrl: string;
  readonly warmupSec: number;
  readonly measureSec: number;
  readonly rounds: number;
  readonly inFlight: number;
  readonly keys: number;
  /** The wrk binary as asked (`BENCH_WRK`). */
  readonly wrk: string | undefined;
}

/** One cell: an API; the medians in clear and over TLS. */
export interface TlsCell {
  readonly api: 'gRPC' | 'HTTP';
  readonly clear: PeerFigures;
  readonly tls: PeerFigures;
}

export interface TlsResult {
  readonly cells: readonly TlsCell[];
  readonly skipped: readonly string[];
  readonly settings: TlsSettings;
}

const NATIVE_RULES = JSON.stringify({
  resources: { [PEER_RESOURCE]: { limits: { algorithm: 'fixed-window', limit: 1_000_000_000, windowMs: 1000 } } },
});

/** A CA and a server certificate it signed for 127.0.0.1 and localhost, in `dir`: ca.crt, server.crt, server.key. */
function makeCertificates(dir: string): { ca: string; cert: string; key: string } {
  const at = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  openssl('req', '-x509', ...ec, '-days', '2', '-subj', '/CN=sluice-bench-ca', '-keyout', at('ca.key'), '-out', at('ca.crt'));
  openssl('req', ...ec, '-subj', '/CN=localhost', '-keyout', at('server.key'), '-out', at('server.csr'));
  writeFileSync(at('server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  openssl('x509', '-req', '-in', at('server.csr'), '-CA', at('ca.crt'), '-CAkey', at('ca.key'), '-CAcreateserial',
    '-days', '2', '-extfile', at('server.ext'), '-out', at('server.crt')); // prettier-ignore
  return { ca: at('ca.crt'), cert: at('server.crt'), key: at('server.key') };
}

/** Runs both cells; a missing tool skips its cell with the reason. */
export async function runServiceTls(s: TlsSettings, progress: (line: string) => void): Promise<TlsResult> {
  const clockTicks = clockTicksPerSec();
  const ghz = await findOrBuild('ghz', cacheDir(process.env), progress);
  const wrk = findWrkBinary(s.wrk);
  const skipped: string[] = [];
  if ('missing' in ghz) skipped.push(`gRPC cell: ghz unavailable (${ghz.missing})`);
  if ('missing' in wrk) skipped.push(`HTTP cell: wrk unavailable (${wrk.missing})`);
  const dir = await makeTempDir('sluice-bench-tls-');
  const rules = [
    { name: 'bench.yaml', text: PEER_YAML },
    { name: 'native.json', text: NATIVE_RULES },
  ];
  const started: ServiceProcess[] = [];
  const cells: TlsCell[] = [];
  try {
    const certs = makeCertificates(dir);
    const clear = await startService({ kind: 'redis', url: s.redisUrl, prefix: `bench:${s.runId}:tls-clear` }, rules);
    started.push(clear);
    const tls = await startService({ kind: 'redis', url: s.redisUrl, prefix: `bench:${s.runId}:tls` }, rules, [
      '--tls-cert',
      certs.cert,
      '--tls-key',
      certs.key,
    ]);
    started.push(tls);
    const run = (seconds: number): LoadRun => ({ inFlight: s.inFlight, keys: s.keys, seconds });
    const body = sluiceCheckBody(PEER_RESOURCE);
    for (const api of ['gRPC', 'HTTP'] as const) {
      let loads: Record<'clear' | 'tls', (seconds: number) => Promise<LoadResult>>;
      if (api === 'gRPC') {
        if ('missing' in ghz) continue;
        loads = {
          clear: (sec) => runGhz(ghz.path, clear.grpcTarget, run(sec)),
          tls: (sec) => runGhz(ghz.path, tls.grpcTarget, run(sec), certs.ca),
        };
      } else {
        if ('missing' in wrk) continue;
        loads = {
          clear: (sec) => runWrkBodies(wrk.path, `${clear.url}/v1/check`, body, run(sec)),
          tls: (sec) => runWrkBodies(wrk.path, `${tls.url}/v1/check`, body, run(sec)),
        };
      }
      progress(`  ${api}, in clear and over TLS...`);
      const runs = {
        clear: [] as (LoadResult & { cpuUsPerCall: number })[],
        tls: [] as (LoadResult & { cpuUsPerCall: number })[],
      };
      const pids = { clear: clear.pid, tls: tls.pid };
      for (let round = 0; round < s.rounds; round++) {
        // Alternate who goes first, so neither always runs on the warmer machine.
        const order = round % 2 === 0 ? (['clear', 'tls'] as const) : (['tls', 'clear'] as const);
        for (const which of order) runs[which].push(await measure(pids[which], loads[which], s, clockTicks));
      }
      cells.push({ api, clear: figures(runs.clear), tls: figures(runs.tls) });
    }
  } finally {
    for (const p of started) await p.stop();
    await removeTempDir(dir);
  }
  return { cells, skipped, settings: s };
}

/** The part's table: per API, in clear and over TLS, their ratios, and the CPU TLS adds per decision. */
export function serviceTlsTable(r: TlsResult): Table {
  const s = r.settings;
  const ms = (us: number) => fmt(us / 1000, 2);
  return {
    title: `What TLS costs sluice serve (same Redis and rules; ${s.keys === 1 ? 'one hot key' : `${fmtInt(s.keys)} keys`}, ${s.inFlight} in flight on held connections; gRPC by ghz, HTTP by wrk; medians of ${s.rounds} runs of ${s.measureSec} s)`,
    header: [
      'API',
      'clear/s',
      'TLS/s',
      'ratio',
      'p50 ms clear / TLS',
      'p99 ms clear / TLS',
      'CPU us/decision clear / TLS',
      'TLS adds',
      'errors',
    ],
    align: ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    rows: r.cells.map((c) => [
      c.api,
      fmtInt(c.clear.perSec),
      fmtInt(c.tls.perSec),
      fmtRatio(c.tls.perSec / c.clear.perSec),
      `${ms(c.clear.p50Us)} / ${ms(c.tls.p50Us)}`,
      `${ms(c.clear.p99Us)} / ${ms(c.tls.p99Us)}`,
      `${fmt(c.clear.cpuUsPerCall)} / ${fmt(c.tls.cpuUsPerCall)}`,
      `${fmt(c.tls.cpuUsPerCall - c.clear.cpuUsPerCall)} us`,
      `${c.clear.errors} / ${c.tls.errors}`,
    ]),
    notes: [
      'ratio: TLS/clear decisions per second (above 1x: TLS was faster). TLS adds: server CPU per decision over TLS less in clear.',
      ...r.skipped.map((why) => `skipped: ${why}`),
      ...r.cells.flatMap((c) =>
        [c.clear.firstError, c.tls.firstError].filter((e) => e !== undefined).map((e) => `${c.api} first error: ${e}`),
      ),
    ],
  };
}
