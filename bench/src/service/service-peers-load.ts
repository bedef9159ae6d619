import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { makeTempDir, removeTempDir, startChild, stopChild } from './service-children.js';
import { PROTO_DIR } from './service-load.js';
import { WRK_DONE_LUA, parseWrkReport, wrkErrors } from './service-measure.js';

/** What one load run measured: calls per second and latency per call (microseconds). */
export interface LoadResult {
  readonly perSec: number;
  readonly p50Us: number;
  readonly p99Us: number;
  readonly ok: number;
  readonly errors: number;
  readonly firstError: string | undefined;
}

/** One load run: where to, how many calls in flight, over how many keys (1: one hot key), how long. */
export interface LoadRun {
  readonly inFlight: number;
  readonly keys: number;
  readonly seconds: number;
  /** ghz: the connections its calls are spread over. @default 1 */
  readonly connections?: number;
}

/** The Envoy domain and descriptor key of every call (both peers load the same YAML). */
export const PEER_DOMAIN = 'bench';
export const PEER_DESCRIPTOR_KEY = 'user';

async function run(bin: string, args: readonly string[], seconds: number): Promise<string> {
  const child = startChild(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString('utf8')));
  child.stderr!.on('data', (c: Buffer) => (err = (err + c.toString('utf8')).slice(-2000)));
  const timer = setTimeout(() => void stopChild(child, 1000), (seconds + 30) * 1000);
  try {
    const [code] = (await once(child, 'exit')) as [number | null];
    if (code !== 0) throw new Error(`${bin} exited with ${code}: ${(err || out).slice(-500)}`);
  } finally {
    clearTimeout(timer);
    await stopChild(child);
  }
  return out;
}

/** How ghz reports the calls it cut when its run time is over. */
const CUT_AT_END = /closed network connection|connection is closing|transport is closing|context canceled|code = Canceled/;

interface GhzReport {
  readonly rps?: number;
  readonly count?: number;
  readonly latencyDistribution?: readonly { readonly percentage: number; readonly latency: number }[] | null;
  readonly statusCodeDistribution?: Readonly<Record<string, number>>;
  readonly errorDistribution?: Readonly<Record<string, number>> | null;
}

/**
 * ghz, closed loop: `inFlight` workers on one connection (as one Envoy worker talks to its rate
 * limit service; `connections` spreads them over more) for `seconds`, each call a ShouldRateLimit of one descriptor whose value cycles
 * through `keys` values (the request number modulo keys) or is one hot value. With `caFile`, over
 * TLS trusting that CA (`--cacert`); else in clear.
 */
export async function runGhz(bin: string, target: string, r: LoadRun, caFile?: string): Promise<LoadResult> {
  const value = r.keys === 1 ? 'hot' : `t{{mod .RequestNumber ${r.keys}}}`;
  const data = JSON.stringify({
    domain: PEER_DOMAIN,
    descriptors: [{ entries: [{ key: PEER_DESCRIPTOR_KEY, value }] }],
  });
  const out = await run(
    bin,
    [
      ...(caFile === undefined ? ['--insecure'] : ['--cacert', caFile]),
      '--proto',
      join(PROTO_DIR, 'envoy/service/ratelimit/v3/rls.proto'),
      '--import-paths',
      PROTO_DIR,
      '--call',
      'envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
      '-d',
      data,
      '-c',
      String(r.inFlight),
      '--connections',
      String(r.connections ?? 1),
      '-z',
      `${r.seconds}s`,
      '-O',
      'json',
      target,
    ],
    r.seconds,
  );
  const report = JSON.parse(out) as GhzReport;
  const at = (p: number) => (report.latencyDistribution ?? []).find((l) => l.percentage === p)?.latency ?? NaN;
  const ok = report.statusCodeDistribution?.OK ?? 0;
  const failed = Object.entries(report.statusCodeDistribution ?? {}).reduce((n, [k, v]) => (k === 'OK' ? n : n + v), 0);
  // ghz ends a timed run by closing its connection under the calls still in flight: at most
  // one per worker fails that way, and is no fault of the server.
  const cutAtEnd = Object.entries(report.errorDistribution ?? {})
    .filter(([message]) => CUT_AT_END.test(message))
    .reduce((n, [, v]) => n + v, 0);
  const errors = cutAtEnd <= r.inFlight ? failed - cutAtEnd : failed;
  const messages = Object.keys(report.errorDistribution ?? {});
  const first = errors === 0 ? undefined : (messages.find((m) => !CUT_AT_END.test(m)) ?? messages[0]);
  return {
    perSec: report.rps ?? NaN,
    p50Us: at(50) / 1000,
    p99Us: at(99) / 1000,
    ok,
    errors,
    firstError: first,
  };
}

/**
 * The wrk script: POSTs a JSON body per request, built from `template` with `%s` replaced by a
 * key that cycles through `keys` values (or one hot value), and prints the report line.
 * Arguments (after `--`): keys.
 */
function wrkScript(template: string): string {
  return `
local keys
local n = 0
local headers = { ["Content-Type"] = "application/json" }
local template = ${JSON.stringify(template)}

function init(args)
  keys = tonumber(args[1])
end

function request()
  n = n + 1
  local key = "hot"
  if keys > 1 then key = "t" .. (n % keys) end
  return wrk.format("POST", nil, headers, string.format(template, key))
end

${WRK_DONE_LUA}`;
}

/** The body of Sluice's `/v1/check` for a native resource. */
export function sluiceCheckBody(resource: string): string {
  return `{"resource":"${resource}","key":"%s"}`;
}

/** The body of envoyproxy/ratelimit's `/json`: the RateLimitRequest as JSON. */
export const ENVOY_JSON_BODY = `{"domain":"${PEER_DOMAIN}","descriptors":[{"entries":[{"key":"${PEER_DESCRIPTOR_KEY}","value":"%s"}]}]}`;

/** wrk, one thread, `inFlight` connections (one request each in flight), POSTing `template` bodies to `url`. */
export async function runWrkBodies(bin: string, url: string, template: string, r: LoadRun): Promise<LoadResult> {
  const dir = await makeTempDir('sluice-bench-peers-');
  try {
    const script = join(dir, 'peers.lua');
    await writeFile(script, wrkScript(template));
    const out = await run(
      bin,
      ['-t1', `-c${r.inFlight}`, `-d${r.seconds}s`, '--timeout', '10s', '-s', script, url, '--', String(r.keys)],
      r.seconds,
    );
    const report = parseWrkReport(out);
    const errors = wrkErrors(report);
    return {
      perSec: report.requests / (report.durationUs / 1e6),
      p50Us: report.p50Us,
      p99Us: report.p99Us,
      ok: report.requests - report.errors.status,
      errors,
      firstError: errors === 0 ? undefined : JSON.stringify(report.errors),
    };
  } finally {
    await removeTempDir(dir);
  }
}
