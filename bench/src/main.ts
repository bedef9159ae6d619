/**
 * `npm run bench`: Sluice against rate-limiter-flexible on the same Redis in one run.
 *
 *   1. throughput and latency, closed loop at several calls in flight
 *   2. accuracy of one limit shared by several processes under excess demand
 *   3. heap taken by 1M keys in the in-memory store
 *
 * and a summary of the SPEC's non-functional targets. See bench/README.md.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpus } from 'node:os';
import { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { accuracyTable, runAccuracy, type AccuracyResult, type AccuracySettings } from './accuracy.js';
import { rlfDecider, sluiceDecider, type Decider } from './contenders.js';
import { memoryTable, runMemory, type MemoryResult } from './memory.js';
import { parseOptions, type BenchOptions } from './options.js';
import { startThrowawayRedis, type ThrowawayRedis } from './redis-server.js';
import { summaryTable } from './summary.js';
import { renderTable, type Table } from './table.js';
import { runThroughput, throughputTable, type ThroughputRow } from './throughput.js';

/** The throughput part's limit: generous enough that (nearly) every call is allowed. */
const GENEROUS = 1_000_000_000;

const ACCURACY = Object.freeze({ processes: 4, inFlight: 64, limit: 1000, burst: 100 });

/** The commit the code under test comes from, and whether the work tree differs from it. */
function sourceVersion(): string {
  const git = (...args: string[]) => spawnSync('git', args, { encoding: 'utf8' });
  const head = git('rev-parse', '--short', 'HEAD');
  if (head.status !== 0) return 'unknown (not a git checkout)';
  const dirty = git('status', '--porcelain', '--untracked-files=normal', '--', 'packages', 'bench').stdout.trim() !== '';
  return `commit ${head.stdout.trim()}${dirty ? ' + uncommitted changes in packages/ or bench/' : ''}`;
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
  const resource = `bench:${runId}:tp`;
  const opened: Decider[] = [];
  const admin = new Redis(redisUrl, { lazyConnect: true });
  try {
    await admin.connect();
    const sluice = await sluiceDecider(redisUrl, resource, { algorithm: 'token-bucket', limit: GENEROUS, burst: GENEROUS });
    opened.push(sluice);
    const rlf = await rlfDecider(redisUrl, `rlf:${runId}:tp`, GENEROUS, 1);
    opened.push(rlf);
    const rows = await runThroughput({ sluice, rlf, admin }, options.mode, settle, progress);
    print(throughputTable(rows, options.mode));
    return rows;
  } finally {
    await Promise.all(opened.map((d) => d.close()));
    admin.disconnect();
  }
}

async function accuracyPart(options: BenchOptions, redisUrl: string, runId: string): Promise<AccuracyResult[]> {
  progress('accuracy across processes...');
  const settings: AccuracySettings = { redisUrl, runId, durationMs: options.mode.accuracyMs, ...ACCURACY };
  const results = await runAccuracy(settings, progress);
  print(accuracyTable(results, settings));
  return results;
}

async function memoryPart(options: BenchOptions): Promise<MemoryResult> {
  progress('memory of the in-memory store...');
  await settle();
  const result = await runMemory(options.mode.memoryKeys);
  print(memoryTable(result));
  return result;
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2), process.env);
  const runId = randomBytes(4).toString('hex');
  const needsRedis = options.parts.has('throughput') || options.parts.has('accuracy');
  let server: ThrowawayRedis | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    progress(`${signal}: stopping`);
    const stopping = server?.stop() ?? Promise.resolve();
    stopping.finally(() => process.exit(130)).catch(() => undefined);
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
    process.stdout.write(
      [
        `# Sluice benchmark (${options.mode.name})`,
        '',
        `node ${process.version}, ${cpu.length} x ${cpu[0]?.model.trim() ?? 'unknown CPU'}, ${new Date().toISOString()}`,
        needsRedis
          ? `Redis: ${redisUrl}${server === undefined ? ' (given)' : ` (throwaway redis-server ${server.version}, no persistence)`}`
          : 'Redis: not used',
        `source: ${sourceVersion()}`,
        `run id: ${runId}; parts: ${[...options.parts].join(', ')}`,
        '',
      ].join('\n'),
    );
    const throughput = options.parts.has('throughput') ? await throughputPart(options, redisUrl!, runId) : undefined;
    const accuracy = options.parts.has('accuracy') ? await accuracyPart(options, redisUrl!, runId) : undefined;
    const memory = options.parts.has('memory') ? await memoryPart(options) : undefined;
    print(summaryTable(throughput, accuracy, memory));
  } finally {
    await server?.stop();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exitCode = 1;
});
