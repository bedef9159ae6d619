/**
 * Command line and environment of `npm run bench`, read once at start.
 *
 *   --quick | --full     run length; quick when --quick or BENCH_QUICK=1 (unless --full)
 *   --redis URL          Redis to measure against; default $SLUICE_REDIS_URL, else a throwaway
 *                        redis-server started (and stopped) by the bench
 *   --only a,b           run only some parts: throughput, policies, leases, accuracy, lease-accuracy, outage,
 *                        cluster, memory, embedded, service, gateway, stream, governance, sustained,
 *                        defaults-under-load, abuse, service-peers, service-tls, quota
 *   --write-docs         rewrite docs/benchmarks.md's "Where things stand" and its chart from the run
 *   BENCH_WRK            the wrk binary of the service part's HTTP load (default: wrk on PATH);
 *                        `none`: Node load processes instead
 *   BENCH_CACHE_DIR      where service-peers and service-tls build ghz and envoyproxy/ratelimit
 *                        (default ~/.cache/sluice-bench)
 *   BENCH_SLUICE_WORKERS service-peers: `sluice serve --workers N` (default 1)
 *   BENCH_GHZ_CONNECTIONS service-peers: the connections ghz spreads its calls over, for both
 *                        peers (default 1, as one Envoy worker talks to its rate limit service)
 */

/** The parts of the benchmark, in the order they run. */
export const PARTS = [
  'throughput',
  'policies',
  'leases',
  'accuracy',
  'lease-accuracy',
  'outage',
  'cluster',
  'memory',
  'embedded',
  'service',
  'gateway',
  'stream',
  'governance',
  'sustained',
  'defaults-under-load',
  'abuse',
  'service-peers',
  'service-tls',
  'quota',
] as const;
export type Part = (typeof PARTS)[number];

/** How long each part runs. */
export interface ModeSettings {
  readonly name: 'quick' | 'full';
  /** Closed-loop warm-up before each throughput cell, ms. */
  readonly warmupMs: number;
  /** Measured time of each throughput cell, ms. */
  readonly measureMs: number;
  /** Calls in flight of the throughput cells. */
  readonly inFlight: readonly number[];
  /** Hot-key cells run at these in-flight counts (a single key is the same as many at 1). */
  readonly hotInFlight: readonly number[];
  /** Distinct keys cycled through by the many-keys cells. */
  readonly keys: number;
  /** Length of each accuracy run, ms. */
  readonly accuracyMs: number;
  /** Keys put in the in-memory store. */
  readonly memoryKeys: number;
  /** Warm-up of each lease-throughput cell, ms. */
  readonly leaseWarmupMs: number;
  /** Measured time of each lease-throughput cell, ms. */
  readonly leaseMeasureMs: number;
  /** Warm-up of each Redis Cluster hot-key cell, ms. */
  readonly clusterWarmupMs: number;
  /** Measured time of each Redis Cluster hot-key cell, ms. */
  readonly clusterMeasureMs: number;
  /** Warm-up of each service cell, ms (whole seconds: wrk's unit). */
  readonly serviceWarmupMs: number;
  /** Measured time of each service cell, ms (whole seconds). */
  readonly serviceMeasureMs: number;
}

const QUICK: ModeSettings = Object.freeze({
  name: 'quick',
  warmupMs: 300,
  measureMs: 1500,
  inFlight: [1, 16, 64, 256],
  hotInFlight: [1, 16, 64, 256],
  keys: 100_000,
  accuracyMs: 5000,
  memoryKeys: 1_000_000,
  leaseWarmupMs: 300,
  leaseMeasureMs: 1000,
  clusterWarmupMs: 300,
  clusterMeasureMs: 1000,
  serviceWarmupMs: 1000,
  serviceMeasureMs: 2000,
});

const FULL: ModeSettings = Object.freeze({
  name: 'full',
  warmupMs: 1000,
  measureMs: 5000,
  inFlight: [1, 16, 64, 256],
  hotInFlight: [1, 16, 64, 256],
  keys: 1_000_000,
  accuracyMs: 10_000,
  memoryKeys: 1_000_000,
  leaseWarmupMs: 1000,
  leaseMeasureMs: 5000,
  clusterWarmupMs: 1000,
  clusterMeasureMs: 5000,
  serviceWarmupMs: 2000,
  serviceMeasureMs: 10_000,
});

/** Compiled options of one run. */
export interface BenchOptions {
  readonly mode: ModeSettings;
  /** Redis to use; undefined: start a throwaway server. */
  readonly redisUrl: string | undefined;
  readonly parts: ReadonlySet<Part>;
  /** The service part's wrk binary as asked (`BENCH_WRK`); undefined: `wrk` on PATH if any. */
  readonly wrk: string | undefined;
  /** Rewrite docs/benchmarks.md's "Where things stand" section and its chart from this run. */
  readonly writeDocs: boolean;
  /** service-peers: the worker processes of `sluice serve` (`BENCH_SLUICE_WORKERS`). */
  readonly peerWorkers: number;
  /** service-peers: the connections ghz opens to either peer (`BENCH_GHZ_CONNECTIONS`). */
  readonly ghzConnections: number;
}

/** A positive count from the variable `name`, else `fallback`; throws naming the variable. */
function countOf(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const v = env[name];
  if (v === undefined || v === '') return fallback;
  if (!/^\d{1,3}$/.test(v) || Number(v) < 1) throw new Error(`${name} must be a positive count (got ${JSON.stringify(v)})`);
  return Number(v);
}

const USAGE = `usage: node --expose-gc bench/dist/main.js [--quick | --full] [--redis URL] [--only ${PARTS.join(',')}] [--write-docs]`;

/** Parses argv (without node and script) and the environment; throws with the usage on bad input. */
export function parseOptions(argv: readonly string[], env: NodeJS.ProcessEnv): BenchOptions {
  let quick: boolean | undefined;
  let redisUrl: string | undefined;
  let parts: Set<Part> = new Set(PARTS);
  let writeDocs = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const [flag, inline] = arg.startsWith('--') && arg.includes('=') ? arg.split(/=(.*)/s, 2) : [arg, undefined];
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined || v === '') throw new Error(`${flag} needs a value\n${USAGE}`);
      return v;
    };
    switch (flag) {
      case '--quick':
        quick = true;
        break;
      case '--full':
        quick = false;
        break;
      case '--redis':
        redisUrl = value();
        break;
      case '--only': {
        const wanted = value().split(',');
        for (const p of wanted) {
          if (!(PARTS as readonly string[]).includes(p)) throw new Error(`unknown part ${JSON.stringify(p)}\n${USAGE}`);
        }
        parts = new Set(wanted as Part[]);
        break;
      }
      case '--write-docs':
        writeDocs = true;
        break;
      case '--help':
      case '-h':
        throw new Error(USAGE);
      default:
        throw new Error(`unknown argument ${JSON.stringify(arg)}\n${USAGE}`);
    }
  }
  quick ??= env.BENCH_QUICK === '1' || env.BENCH_QUICK === 'true';
  redisUrl ??= env.SLUICE_REDIS_URL || undefined;
  const wrk = env.BENCH_WRK || undefined;
  const peerWorkers = countOf(env, 'BENCH_SLUICE_WORKERS', 1);
  const ghzConnections = countOf(env, 'BENCH_GHZ_CONNECTIONS', 1);
  return Object.freeze({ mode: quick ? QUICK : FULL, redisUrl, parts, wrk, writeDocs, peerWorkers, ghzConnections });
}
