import { hashTag } from '@sluice/redis';
import { Redis } from 'ioredis';
import { rlfDecider, sluiceDecider, type Decider } from '../harness/contenders.js';
import { readRedisStats, type RedisStats } from '../harness/redis-stats.js';
import { startThrowawayCluster, type RedisCluster } from '../harness/redis-server.js';
import { PREFIX } from '../harness/sluice-store.js';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';
import { closedLoop, type LoopResult } from './throughput.js';

/** Generous enough that every call is allowed: each call does the full read-decide-write. */
const GENEROUS = 1_000_000_000;

export interface ClusterSettings {
  readonly runId: string;
  readonly masters: number;
  readonly inFlight: number;
  /** `split` values of the Sluice cells. */
  readonly splits: readonly number[];
  readonly warmupMs: number;
  readonly measureMs: number;
}

/** What one master did during a cell. */
export interface NodeLoad {
  readonly commands: number;
  readonly scripts: number;
  /** CPU use of the server, percent of one core. */
  readonly cpuPercent: number;
  /** Keys of the cell (sub-keys for Sluice) that live on this master. */
  readonly keys: number;
}

export interface ClusterCell extends LoopResult {
  readonly contender: 'sluice' | 'rlf';
  /** Sub-keys per key (1 for RLF). */
  readonly split: number;
  /** Per master, in the order of the cluster's nodes. */
  readonly nodes: readonly NodeLoad[];
}

export interface ClusterResult {
  readonly settings: ClusterSettings;
  readonly nodes: readonly string[];
  readonly redisVersion: string;
  readonly cells: readonly ClusterCell[];
}

/** The master that serves a Redis key, by asking the cluster for the key's slot. */
async function masterOf(admin: Redis, cluster: RedisCluster, name: string): Promise<number> {
  const slot = Number(await admin.call('CLUSTER', 'KEYSLOT', name));
  const i = cluster.slots.findIndex(([from, to]) => slot >= from && slot <= to);
  if (i < 0) throw new Error(`no master serves slot ${slot}`);
  return i;
}

async function runCell(
  cluster: RedisCluster,
  admins: readonly Redis[],
  s: ClusterSettings,
  contender: 'sluice' | 'rlf',
  split: number,
  progress: (line: string) => void,
): Promise<ClusterCell> {
  const target = { clusterNodes: cluster.nodes };
  let decider: Decider;
  let names: string[];
  if (contender === 'sluice') {
    const resource = `bench:${s.runId}:cluster:split${split}`;
    decider = await sluiceDecider(target, resource, { algorithm: 'token-bucket', limit: GENEROUS, burst: GENEROUS }, { split });
    // The storage keys of the resource's key 'hot': `<resource>|hot`, or its sub-keys `...#i`.
    const base = `${resource}|hot`;
    names = split === 1 ? [base] : Array.from({ length: split }, (_, i) => `${base}#${i}`);
    names = names.map((k) => `${PREFIX}${hashTag(k)}`);
  } else {
    const keyPrefix = `rlf:${s.runId}:cluster`;
    decider = await rlfDecider(target, keyPrefix, GENEROUS, 1);
    names = [`${keyPrefix}:hot`];
  }
  try {
    const keys = new Array<number>(cluster.nodes.length).fill(0);
    for (const name of names) keys[await masterOf(admins[0]!, cluster, name)]!++;
    const before = await Promise.all(admins.map((a) => readRedisStats(a)));
    const started = performance.now();
    const r = await closedLoop(decider, () => 'hot', s.inFlight, s.warmupMs, s.measureMs);
    const seconds = (performance.now() - started) / 1000;
    const after = await Promise.all(admins.map((a) => readRedisStats(a)));
    const load = (b: RedisStats | undefined, a: RedisStats | undefined, i: number): NodeLoad => ({
      commands: a && b ? a.calls - b.calls : NaN,
      scripts: a && b ? a.scripts - b.scripts : NaN,
      cpuPercent: a && b ? (100 * (a.cpuSec - b.cpuSec)) / seconds : NaN,
      keys: keys[i]!,
    });
    const cell = { ...r, contender, split, nodes: before.map((b, i) => load(b, after[i], i)) };
    progress(`  ${contender === 'sluice' ? `sluice split ${split}` : 'rlf'}: ${fmtInt(r.perSec)}/s`);
    return cell;
  } finally {
    await decider.close();
  }
}

/**
 * One hot key on a throwaway Redis Cluster of `masters` masters: Sluice with the key split over
 * 1, 3 and 8 sub-keys, then RLF, each a closed loop at `inFlight` calls; per master, the share of
 * commands it ran and its CPU use.
 */
export async function runCluster(s: ClusterSettings, progress: (line: string) => void): Promise<ClusterResult> {
  const cluster = await startThrowawayCluster(s.masters);
  const admins: Redis[] = [];
  try {
    for (const node of cluster.nodes) {
      const [host, port] = node.split(':');
      const admin = new Redis(Number(port), host!, { lazyConnect: true });
      await admin.connect();
      admins.push(admin);
    }
    const cells: ClusterCell[] = [];
    for (const split of s.splits) cells.push(await runCell(cluster, admins, s, 'sluice', split, progress));
    cells.push(await runCell(cluster, admins, s, 'rlf', 1, progress));
    return { settings: s, nodes: cluster.nodes, redisVersion: cluster.servers[0]?.version ?? 'unknown', cells };
  } finally {
    for (const a of admins) a.disconnect();
    await cluster.stop();
  }
}

function shares(values: readonly number[]): string {
  const total = values.reduce((a, b) => a + b, 0);
  if (!(total > 0)) return 'n/a';
  return values.map((v) => ((100 * v) / total).toFixed(0)).join(' / ');
}

/** The table of the cluster part. */
export function clusterTable(r: ClusterResult): Table {
  const s = r.settings;
  const rlf = r.cells.find((c) => c.contender === 'rlf');
  const rows: string[][] = [];
  for (const c of r.cells) {
    const decisions = c.completed;
    const commands = c.nodes.reduce((a, n) => a + n.commands, 0);
    const scripts = c.nodes.reduce((a, n) => a + n.scripts, 0);
    rows.push([
      c.contender === 'sluice' ? `Sluice split: ${c.split}` : 'RLF',
      fmtInt(c.perSec),
      rlf === undefined || c === rlf ? '' : fmtRatio(c.perSec / rlf.perSec),
      fmtInt(c.p50),
      fmtInt(c.p99),
      decisions === 0 ? 'n/a' : fmt(scripts / decisions, 3),
      decisions === 0 ? 'n/a' : fmt(commands / decisions, 2),
      c.nodes.map((n) => n.keys).join(' / '),
      shares(c.nodes.map((n) => n.commands)),
      c.nodes.map((n) => fmt(n.cpuPercent, 0)).join(' / '),
      c.errors === 0
        ? '0'
        : `${fmtInt(c.errors)} (${c.firstError instanceof Error ? c.firstError.message : String(c.firstError)})`.slice(0, 60),
    ]);
  }
  return {
    title: `Hot key on Redis Cluster: ${s.masters} masters, one key, ${s.inFlight} in flight`,
    header: [
      'contender',
      'decisions/s',
      'vs RLF',
      'p50 us',
      'p99 us',
      'scripts/dec',
      'cmds/dec',
      'keys per master',
      'commands % per master',
      'CPU % per master',
      'errors',
    ],
    rows,
    notes: [
      `A throwaway cluster of ${s.masters} masters without replicas (redis-server ${r.redisVersion}, slots split evenly), on the same machine as`,
      `the client. Each cell: ${s.warmupMs} ms warm-up, then ${s.measureMs} ms measured, a closed loop of ${s.inFlight} calls on one key; Sluice's`,
      'limit is a token bucket of 10^9/s (every call allowed), `split: N` spreads the key over N sub-keys (each in its',
      "own hash slot), no leases; RLF's RateLimiterRedis runs on an ioredis Cluster client. Per master (in slot order):",
      'how many of the keys (sub-keys) it holds, its share of all commands run by the cluster in the cell (INFO',
      'commandstats, a script and each command in it counting), and its CPU use (100 = one core). scripts/dec and cmds/dec',
      'are over the whole cell.',
    ],
  };
}
