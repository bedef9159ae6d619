/**
 * Pure helpers of the service part: latency percentiles over the samples of several load
 * processes, the report line of the wrk script, and CPU times from `/proc/<pid>/stat`.
 */

/**
 * The p-th percentile (0 < p <= 100) of ascending `sorted` values by nearest rank: the smallest
 * value with at least p% of the values at or below it. NaN when there are none.
 */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (!(p > 0 && p <= 100)) throw new RangeError(`percentile: p must be in (0, 100], got ${p}`);
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

/** The samples of several load processes as one ascending array. */
export function mergeSamples(parts: readonly ArrayLike<number>[]): Float64Array {
  const total = parts.reduce((n, p) => n + p.length, 0);
  const out = new Float64Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out.sort();
}

/** What one wrk run reports (its `done` hook, see service-wrk.ts). Latencies in microseconds. */
export interface WrkReport {
  /** Responses received. */
  readonly requests: number;
  /** Length of the run as wrk timed it, microseconds. */
  readonly durationUs: number;
  readonly errors: {
    readonly connect: number;
    readonly read: number;
    readonly write: number;
    /** Responses with a status of 400 or more. */
    readonly status: number;
    readonly timeout: number;
  };
  readonly p50Us: number;
  readonly p99Us: number;
  readonly p999Us: number;
  readonly maxUs: number;
}

/** The prefix of the line the wrk script prints, followed by a JSON object. */
export const WRK_REPORT_MARK = 'SLUICE_WRK_REPORT ';

const WRK_FIELDS = [
  'requests',
  'duration_us',
  'connect',
  'read',
  'write',
  'status',
  'timeout',
  'p50',
  'p99',
  'p999',
  'max',
] as const;

/** Reads the report line out of wrk's standard output; throws when it is missing or incomplete. */
export function parseWrkReport(stdout: string): WrkReport {
  const line = stdout.split('\n').find((l) => l.startsWith(WRK_REPORT_MARK));
  if (line === undefined) throw new Error(`wrk printed no report line (${JSON.stringify(stdout.slice(0, 200))})`);
  let raw: unknown;
  try {
    raw = JSON.parse(line.slice(WRK_REPORT_MARK.length));
  } catch (err) {
    throw new Error(`wrk's report line is not JSON: ${line}`, { cause: err });
  }
  const r = raw as Record<string, unknown>;
  for (const f of WRK_FIELDS) {
    if (typeof r[f] !== 'number' || !Number.isFinite(r[f]) || r[f] < 0) {
      throw new Error(`wrk's report line has no valid ${f}: ${line}`);
    }
  }
  const n = (f: (typeof WRK_FIELDS)[number]) => r[f] as number;
  return {
    requests: n('requests'),
    durationUs: n('duration_us'),
    errors: { connect: n('connect'), read: n('read'), write: n('write'), status: n('status'), timeout: n('timeout') },
    p50Us: n('p50'),
    p99Us: n('p99'),
    p999Us: n('p999'),
    maxUs: n('max'),
  };
}

/** Socket, status and timeout errors of a wrk run. */
export function wrkErrors(r: WrkReport): number {
  const e = r.errors;
  return e.connect + e.read + e.write + e.status + e.timeout;
}

/** CPU times of a process in clock ticks, from `/proc/<pid>/stat`. */
export interface ProcCpu {
  readonly user: number;
  readonly system: number;
  /** Of its children that ended and were waited for. */
  readonly childUser: number;
  readonly childSystem: number;
}

/**
 * Parses `/proc/<pid>/stat` (proc(5)): utime, stime, cutime and cstime are fields 14 to 17. The
 * command name (field 2) is in parentheses and may hold spaces and parentheses itself, so the
 * fields are counted from the last `)`.
 */
export function parseProcStat(text: string): ProcCpu {
  const close = text.lastIndexOf(')');
  if (close < 0) throw new Error(`not a /proc/<pid>/stat line: ${JSON.stringify(text.slice(0, 80))}`);
  // After the name: field 3 (state) is index 0, so field k is index k - 3.
  const fields = text
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  const at = (field: number) => {
    const v = Number(fields[field - 3]);
    if (!Number.isInteger(v) || v < 0) throw new Error(`/proc/<pid>/stat: field ${field} is not a tick count`);
    return v;
  };
  return { user: at(14), system: at(15), childUser: at(16), childSystem: at(17) };
}

/** CPU time of the whole machine in clock ticks, from the `cpu` line of `/proc/stat`. */
export interface MachineCpu {
  /** user + nice + system + irq + softirq: time some process or the kernel ran. */
  readonly busy: number;
  /** idle + iowait. */
  readonly idle: number;
  /** Time the hypervisor ran something else while this machine wanted the CPU. */
  readonly steal: number;
}

/** Parses the first (`cpu`, all cores) line of `/proc/stat` (proc(5)). */
export function parseMachineStat(text: string): MachineCpu {
  const line = text.split('\n').find((l) => l.startsWith('cpu '));
  if (line === undefined) throw new Error('/proc/stat has no cpu line');
  const v = line
    .slice(4)
    .trim()
    .split(/\s+/)
    .map((x) => Number(x));
  if (v.length < 8 || v.slice(0, 8).some((x) => !Number.isInteger(x) || x < 0)) {
    throw new Error(`/proc/stat: not a cpu line: ${line}`);
  }
  const [user, nice, system, idle, iowait, irq, softirq, steal] = v as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  return { busy: user + nice + system + irq + softirq, idle: idle + iowait, steal };
}

/** Cores used over `seconds` of wall time by `ticks` of CPU time (`ticksPerSec` = CLK_TCK). */
export function coresUsed(ticks: number, seconds: number, ticksPerSec: number): number {
  return seconds > 0 ? ticks / ticksPerSec / seconds : NaN;
}

/**
 * The sum of a metric's samples over every label set in Prometheus text format (0 when it has
 * none yet: a counter with labels appears only once incremented).
 */
export function sumMetric(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(value)) sum += value;
  }
  return sum;
}

/** wrk's `done` hook (Lua) that prints the report {@link parseWrkReport} reads; every wrk script ends with it. */
export const WRK_DONE_LUA = `function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '${WRK_REPORT_MARK}{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p99":%d,"p999":%d,"max":%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    math.floor(latency:percentile(50)), math.floor(latency:percentile(99)), math.floor(latency:percentile(99.9)),
    math.floor(latency.max)))
end
`;
