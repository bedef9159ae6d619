/**
 * `npm run bench`: Sluice against rate-limiter-flexible on the same Redis in one run.
 *
 *   1. throughput and latency, closed loop at several calls in flight, and the round trips shared
 *   2. lease throughput in one process (trySync), against plain try
 *   3. accuracy of one limit shared by several processes under excess demand
 *   4. the same with leases
 *   5. a Redis outage (SIGKILL, restart) under load, per store-failure policy
 *   6. one hot key on a 3-master Redis Cluster, split over sub-keys or not
 *   7. heap taken by 1M keys in the in-memory store
 *   7b. the embedded store's decisions/s beside RLF's memory limiter (embedded)
 *   8. `sluice serve` over HTTP and gRPC against Limiter.try in one process
 *   9. `sluice serve` beside envoyproxy/ratelimit (service-peers)
 *  10. what TLS costs `sluice serve` per decision (service-tls)
 *
 * and a summary of the SPEC's non-functional targets. See bench/README.md.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpus } from 'node:os';
import { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  accuracyRuns,
  accuracyTable,
  leaseAccuracyRuns,
  leaseAccuracyTable,
  runAccuracy,
  type AccuracyResult,
  type AccuracySettings,
} from './accuracy/accuracy.js';
import { clusterTable, runCluster, type ClusterResult } from './redis/cluster.js';
import { runAbuse } from './service/abuse.js';
import { runDefaultsUnderLoad } from './accuracy/defaults-under-load.js';
import { leaseTable, runLeaseThroughput, type LeaseCellResult, type LeaseSettings } from './redis/lease-throughput.js';
import { embeddedTable, runEmbedded, type EmbeddedResult } from './memory/embedded.js';
import { memoryTable, runMemory, type MemoryResult } from './memory/memory.js';
import { parseOptions, type BenchOptions } from './options.js';
import { outageSummaryTable, outageTimelineTable, runOutage, type OutageResult, type OutageSettings } from './redis/outage.js';
import { startThrowawayRedis, stopAllServers, type RedisServer } from './harness/redis-server.js';
import { stopServiceChildren } from './service/service-children.js';
import { runService, type ServiceCell } from './service/service.js';
import { runServicePeers, servicePeersTable, type PeerResult } from './service/service-peers.js';
import { runServiceTls, serviceTlsTable } from './service/service-tls.js';
import { quotaTable, runQuota } from './service/quota.js';
import { serviceTable } from './service/service-table.js';
import { findWrk } from './service/service-wrk.js';
import { gatewayOverheadTable, runGatewayOverhead } from './stream/gateway-overhead.js';
import { governanceLatencyTable, runGovernanceLatency } from './stream/governance-latency.js';
import { runStreamThroughput, streamThroughputTable } from './stream/stream-throughput.js';
import { summaryTable } from './report/summary.js';
import { sustainedBurstPart } from './stream/sustained-burst.js';
import { policiesTable, runPolicies } from './redis/policies.js';
import { writeStanding } from './report/standing.js';
import { renderTable, type Table } from './report/table.js';
import {
  coalescingTable,
  ContenderProcess,
  runThroughput,
  throughputTable,
  type ThroughputContender,
  type ThroughputRow,
} from './redis/throughput.js';

/** The throughput part's limit: generous enough that (nearly) every call is allowed. */

const ACCURACY = Object.freeze({ processes: 4, inFlight: 64, limit: 1000, burst: 100 });

/** Keys of the lease-throughput part's "many keys" cells, and its caller counts. */
const LEASE = Object.freeze({ manyKeys: 1000, callers: [1, 64] });

/** The outage part: a fixed window of 200/s, two peers, a 50 ms command timeout; kill at 1 s, restart 1.5 s later. */
const OUTAGE = Object.freeze({
  limit: 200,
  peers: 2,
  commandTimeoutMs: 50,
  callers: 8,
  pauseMs: 1,
  beforeKillMs: 1000,
  downMs: 1500,
  afterMs: 1500,
  bucketMs: 100,
});

/** The cluster part: 3 masters, one hot key at 256 in flight, split over 1, 3 and 8 sub-keys. */
const CLUSTER = Object.freeze({ masters: 3, inFlight: 256, splits: [1, 3, 8] });

/** The service part: 256 calls in flight, batches of 50 items at 16 calls in flight, two Node load processes. */
const SERVICE = Object.freeze({ keys: 100_000, inFlight: 256, batch: 50, batchInFlight: 16, loadProcesses: 2 });

/** The commit the code under test comes from, and whether the work tree differs from it. */
function sourceVersion(): string {
  const git = (...args: string[]) => spawnSync('git', args, { encoding: 'utf8' });
  const head = git('rev-parse', '--short', 'HEAD');
  if (head.status !== 0) return 'unknown (not a git checkout)';
  const dirty = ['packages', 'bench'].filter(
    (dir) => git('status', '--porcelain', '--untracked-files=normal', '--', dir).stdout.trim() !== '',
  );
  return `commit ${head.stdout.trim()}${dirty.length > 0 ? ` + uncommitted changes in ${dirty.map((d) => `${d}/`).join(' and ')}` : ''}`;
}

function print(table: Table): void {
  process.stdout.write('\n' + renderTable(table));
}

function progress(line: string): void {
  process.stderr.write(line + '\n');
}

async function settle(): Promise<void> {
  (globalThis as { gc?: () => void }).gc?.();
  await sleep(100);
}

async function throughputPart(options: BenchOptions, redisUrl: string, runId: string): Promise<ThroughputRow[]> {
  progress('throughput and latency...');
  const opened: ContenderProcess[] = [];
  const admin = new Redis(redisUrl, { lazyConnect: true });
  try {
    await admin.connect();
    const start = async (name: ThroughputContender): Promise<ContenderProcess> => {
      const contender = await ContenderProcess.start(name, redisUrl, runId, options.mode.keys);
      opened.push(contender);
      return contender;
    };
    const sluice = await start('sluice');
    const rlf = await start('rlf');
    const reference = await start('reference');
    const rows = await runThroughput({ sluice, rlf, reference, admin }, options.mode, progress);
    print(throughputTable(rows, options.mode));
    print(coalescingTable(rows));
    return rows;
  } finally {
    await Promise.all(opened.map((d) => d.close()));
    admin.disconnect();
  }
}

async function policiesPart(options: BenchOptions, redisUrl: string, runId: string): Promise<void> {
  progress('other policies...');
  const settings = { warmupMs: options.mode.warmupMs, measureMs: options.mode.measureMs, keys: options.mode.keys, inFlight: 64 };
  print(policiesTable(await runPolicies(redisUrl, runId, settings, settle, progress), settings.inFlight, settings.keys));
}

async function leasePart(options: BenchOptions, redisUrl: string, runId: string): Promise<LeaseCellResult[]> {
  progress('lease throughput...');
  const settings: LeaseSettings = {
    redisUrl,
    runId,
    warmupMs: options.mode.leaseWarmupMs,
    measureMs: options.mode.leaseMeasureMs,
    ...LEASE,
  };
  const admin = new Redis(redisUrl, { lazyConnect: true });
  try {
    await admin.connect();
    await settle();
    const results = await runLeaseThroughput(settings, admin, settle, progress);
    print(leaseTable(results, settings));
    return results;
  } finally {
    admin.disconnect();
  }
}

async function accuracyPart(options: BenchOptions, redisUrl: string, runId: string): Promise<AccuracyResult[]> {
  progress('accuracy across processes...');
  const settings: AccuracySettings = { redisUrl, runId, durationMs: options.mode.accuracyMs, ...ACCURACY };
  const results = await runAccuracy(settings, accuracyRuns(settings), progress);
  print(accuracyTable(results, settings));
  return results;
}

async function leaseAccuracyPart(options: BenchOptions, redisUrl: string, runId: string): Promise<AccuracyResult[]> {
  progress('accuracy across processes with leases...');
  const settings: AccuracySettings = { redisUrl, runId, durationMs: options.mode.accuracyMs, ...ACCURACY };
  const results = await runAccuracy(settings, leaseAccuracyRuns(settings), progress);
  print(leaseAccuracyTable(results, settings));
  return results;
}

async function outagePart(runId: string): Promise<OutageResult> {
  progress('Redis outage under load...');
  const settings: OutageSettings = { runId, ...OUTAGE };
  const result = await runOutage(settings, progress);
  print(outageTimelineTable(result));
  print(outageSummaryTable(result));
  return result;
}

async function clusterPart(options: BenchOptions, runId: string): Promise<ClusterResult> {
  progress('hot key on Redis Cluster...');
  await settle();
  const result = await runCluster(
    { runId, ...CLUSTER, warmupMs: options.mode.clusterWarmupMs, measureMs: options.mode.clusterMeasureMs },
    progress,
  );
  print(clusterTable(result));
  return result;
}

async function memoryPart(options: BenchOptions): Promise<MemoryResult> {
  progress('memory of the in-memory store...');
  await settle();
  const result = await runMemory(options.mode.memoryKeys);
  print(memoryTable(result));
  return result;
}

/** Limiter.try and rateLimit on the MemoryStore beside RLF's RateLimiterMemory: 1 and 64 callers, 1,000 keys and a hot key. */
async function embeddedPart(options: BenchOptions): Promise<EmbeddedResult> {
  progress('embedded store beside RLF memory...');
  await settle();
  const quick = options.mode.name === 'quick';
  const settings = { warmupMs: quick ? 200 : 500, measureMs: quick ? 1000 : 2000, rounds: 3, keys: 1000, callers: [1, 64] };
  const result = await runEmbedded(settings, settle, progress);
  print(embeddedTable(result));
  return result;
}

async function servicePart(options: BenchOptions, redisUrl: string, runId: string): Promise<ServiceCell[]> {
  progress('service over HTTP and gRPC...');
  const wrk = findWrk(options.wrk);
  if (wrk === undefined) progress('  no wrk found (BENCH_WRK): the HTTP load comes from Node processes');
  const settings = {
    runId,
    redisUrl,
    warmupMs: options.mode.serviceWarmupMs,
    measureMs: options.mode.serviceMeasureMs,
    wrk,
    ...SERVICE,
  };
  const cells = await runService(settings, settle, progress);
  print(serviceTable(cells, settings));
  return cells;
}

/** How the parts that load a `sluice serve` with ghz and wrk time their runs: 3 rounds of 2 + 5 s (quick: 1 of 1 + 3 s). */
function loadTiming(options: BenchOptions, redisUrl: string, runId: string) {
  const quick = options.mode.name === 'quick';
  return {
    runId,
    redisUrl,
    warmupSec: quick ? 1 : 2,
    measureSec: quick ? 3 : 5,
    rounds: quick ? 1 : 3,
    wrk: options.wrk,
  };
}

/** gRPC and HTTP at 16 and 64 in flight, 1,000 keys and one hot key; medians of 3 runs (1 when quick). */
async function servicePeersPart(options: BenchOptions, redisUrl: string, runId: string): Promise<PeerResult> {
  progress('sluice serve beside envoyproxy/ratelimit...');
  const settings = {
    ...loadTiming(options, redisUrl, runId),
    inFlight: [16, 64],
    keys: [1000, 1],
    workers: options.peerWorkers,
    ghzConnections: options.ghzConnections,
  };
  const result = await runServicePeers(settings, progress);
  print(servicePeersTable(result));
  return result;
}

async function serviceTlsPart(options: BenchOptions, redisUrl: string, runId: string): Promise<void> {
  progress('what TLS costs sluice serve...');
  const settings = { ...loadTiming(options, redisUrl, runId), inFlight: 16, keys: 1000 };
  print(serviceTlsTable(await runServiceTls(settings, progress)));
}

async function quotaPart(options: BenchOptions, redisUrl: string, runId: string): Promise<void> {
  progress('RLQS beside RLS...');
  await settle();
  const quick = options.mode.name === 'quick';
  const settings = {
    runId,
    redisUrl,
    gateways: 4,
    perGateway: 250,
    limit: 200,
    windowSec: 5,
    reportingMs: 500,
    warmupMs: quick ? 3000 : 5000,
    measureMs: quick ? 10_000 : 20_000,
  };
  print(quotaTable(await runQuota(settings, progress)));
}

async function gatewayPart(options: BenchOptions): Promise<void> {
  progress('gateway middleware overhead...');
  await settle();
  const sizes = options.mode.name === 'quick' ? { requests: 200_000, rounds: 5 } : { requests: 1_000_000, rounds: 7 };
  print(gatewayOverheadTable(await runGatewayOverhead(sizes)));
}

/** NATS and RocketMQ cells run when their servers are given (scripts/nats-server.sh, rocketmq-server.sh). */
async function streamPart(options: BenchOptions, redisUrl: string, runId: string): Promise<void> {
  progress('event stream throughput...');
  await settle();
  const settings = {
    redisUrl,
    natsUrl: process.env.SLUICE_NATS_URL,
    rocketMqEndpoints: process.env.SLUICE_ROCKETMQ_ENDPOINTS,
    partitions: 4,
    inFlight: 32,
    warmupMs: options.mode.name === 'quick' ? 500 : 1000,
    measureMs: options.mode.name === 'quick' ? 2000 : 5000,
    runId,
  };
  print(streamThroughputTable(await runStreamThroughput(settings), settings));
}

async function governancePart(options: BenchOptions, redisUrl: string, runId: string): Promise<void> {
  progress('governance latency...');
  await settle();
  const settings = {
    redisUrl,
    runId,
    gateways: 4,
    partitions: 8,
    bursts: options.mode.name === 'quick' ? 5 : 20,
    limit: 200,
    tickMs: 100,
    natsUrl: process.env.SLUICE_NATS_URL,
    rocketMqEndpoints: process.env.SLUICE_ROCKETMQ_ENDPOINTS,
  };
  print(governanceLatencyTable(await runGovernanceLatency(settings, progress), settings));
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2), process.env);
  const runId = randomBytes(4).toString('hex');
  // The outage and cluster parts start servers of their own.
  const needsRedis = (
    [
      'throughput',
      'policies',
      'leases',
      'accuracy',
      'lease-accuracy',
      'service',
      'stream',
      'governance',
      'service-peers',
      'service-tls',
      'quota',
      'abuse',
    ] as const
  ).some((p) => options.parts.has(p));
  let server: RedisServer | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    progress(`${signal}: stopping`);
    // Every redis-server the bench started (the shared one, the outage's, the cluster's) and
    // every process of the service part.
    Promise.allSettled([stopAllServers(), stopServiceChildren()])
      .finally(() => process.exit(130))
      .catch(() => undefined);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    let redisUrl = options.redisUrl;
    if (needsRedis && redisUrl === undefined) {
      server = await startThrowawayRedis();
      redisUrl = server.url;
    }
    const cpu = cpus();
    const machine = `node ${process.version}, ${cpu.length} x ${cpu[0]?.model.trim() ?? 'unknown CPU'}, ${new Date().toISOString()}`;
    process.stdout.write(
      [
        `# Sluice benchmark (${options.mode.name})`,
        '',
        machine,
        needsRedis
          ? `Redis: ${redisUrl}${server === undefined ? ' (given)' : ` (throwaway redis-server ${server.version}, no persistence)`}`
          : 'Redis: not used',
        `source: ${sourceVersion()}`,
        `run id: ${runId}; parts: ${[...options.parts].join(', ')}`,
        '',
      ].join('\n'),
    );
    const throughput = options.parts.has('throughput') ? await throughputPart(options, redisUrl!, runId) : undefined;
    if (options.parts.has('policies')) await policiesPart(options, redisUrl!, runId);
    const leases = options.parts.has('leases') ? await leasePart(options, redisUrl!, runId) : undefined;
    const accuracy = options.parts.has('accuracy') ? await accuracyPart(options, redisUrl!, runId) : undefined;
    const leaseAccuracy = options.parts.has('lease-accuracy') ? await leaseAccuracyPart(options, redisUrl!, runId) : undefined;
    const outage = options.parts.has('outage') ? await outagePart(runId) : undefined;
    const cluster = options.parts.has('cluster') ? await clusterPart(options, runId) : undefined;
    const memory = options.parts.has('memory') ? await memoryPart(options) : undefined;
    const embedded = options.parts.has('embedded') ? await embeddedPart(options) : undefined;
    if (options.parts.has('service')) await servicePart(options, redisUrl!, runId);
    if (options.parts.has('gateway')) await gatewayPart(options);
    if (options.parts.has('stream')) await streamPart(options, redisUrl!, runId);
    if (options.parts.has('governance')) await governancePart(options, redisUrl!, runId);
    if (options.parts.has('sustained')) await sustainedBurstPart(options.mode.name === 'quick', redisUrl, runId, progress, print);
    if (options.parts.has('defaults-under-load')) print(await runDefaultsUnderLoad(options.mode.accuracyMs, runId, progress));
    if (options.parts.has('abuse')) print(await runAbuse(options.mode.accuracyMs, redisUrl!, runId, progress));
    const servicePeers = options.parts.has('service-peers') ? await servicePeersPart(options, redisUrl!, runId) : undefined;
    if (options.parts.has('service-tls')) await serviceTlsPart(options, redisUrl!, runId);
    if (options.parts.has('quota')) await quotaPart(options, redisUrl!, runId);
    const summary = summaryTable({
      throughput,
      leases,
      accuracy,
      leaseAccuracy,
      outage,
      cluster,
      memory,
      embedded,
      servicePeers,
    });
    print(summary);
    if (options.writeDocs) {
      const context = [
        `\`npm run bench -- ${process.argv.slice(2).join(' ')}\` (${options.mode.name})`,
        machine,
        `source: ${sourceVersion()}`,
      ];
      const embeddedCells = embedded === undefined ? undefined : embeddedTable(embedded);
      for (const file of await writeStanding({ context, summary, throughput, embedded: embeddedCells }))
        progress(`wrote ${file}`);
    }
  } finally {
    await stopServiceChildren();
    await server?.stop();
    await stopAllServers();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** How long the process may stay alive after the run before the bench ends it. */
const EXIT_GRACE_MS = 2000;

main()
  .catch((err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : err);
    process.exitCode = 1;
  })
  .finally(() => {
    // Everything the bench opened is closed by now, so the process normally exits at once. A
    // client library can leave a timer armed (an ioredis Cluster client closed while one of its
    // periodic slot refreshes was in flight re-arms the next one), which would keep the process
    // alive for ever: say so and end it. The timer is unref'd, so it never delays a clean exit.
    setTimeout(() => {
      const left = process.getActiveResourcesInfo().filter((r) => r !== 'TTYWrap');
      progress(`still running ${EXIT_GRACE_MS} ms after the run (active: ${left.join(', ') || 'none'}); exiting`);
      process.exit();
    }, EXIT_GRACE_MS).unref();
  });
