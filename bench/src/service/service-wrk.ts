import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { makeTempDir, procCpu, removeTempDir, startChild, stopChild } from './service-children.js';
import { WRK_DONE_LUA, parseWrkReport, type WrkReport } from './service-measure.js';

/**
 * The wrk script: POSTs `/v1/check` bodies built per request (one item, or `{ items: [...] }`
 * of `batch` items), cycling through `keys` keys, and prints the report line at the end.
 * Arguments (after `--`): resource, keys, batch.
 */
const SCRIPT = `
local resource, keys, batch
local n = 0
local headers = { ["Content-Type"] = "application/json" }

function init(args)
  resource = args[1]
  keys = tonumber(args[2])
  batch = tonumber(args[3])
end

local function item()
  n = n + 1
  return '{"resource":"' .. resource .. '","key":"k' .. (n % keys) .. '"}'
end

function request()
  local body
  if batch == 0 then
    body = item()
  else
    local items = {}
    for i = 1, batch do items[i] = item() end
    body = '{"items":[' .. table.concat(items, ",") .. ']}'
  end
  return wrk.format("POST", "/v1/check", headers, body)
end

${WRK_DONE_LUA}`;

/** The wrk binary to use, or undefined when there is none (the HTTP cells then use Node clients). */
export function findWrk(wanted: string | undefined): string | undefined {
  if (wanted === 'none') return undefined;
  const bin = wanted ?? 'wrk';
  // `wrk -v` prints its version and exits 1; a missing binary fails to spawn.
  const r = spawnSync(bin, ['-v'], { encoding: 'utf8' });
  return r.error === undefined && /wrk/.test(`${r.stdout}${r.stderr}`) ? bin : undefined;
}

/** One wrk run against a server. */
export interface WrkRun {
  readonly url: string;
  readonly resource: string;
  readonly keys: number;
  /** Items per call; 0: one item per call (no `items` wrapper). */
  readonly batch: number;
  readonly connections: number;
  readonly seconds: number;
}

/** A wrk run's report, its CPU time and wall time. */
export interface WrkOutcome {
  readonly report: WrkReport;
  /** CPU seconds wrk used (user + system), from this process's waited-for children times. */
  readonly cpuSec: number | undefined;
  readonly seconds: number;
}

/**
 * Runs wrk with one thread (the other core is the server's) and the script above. wrk's CPU is
 * read as the growth of this process's children times (`/proc/self/stat` cutime + cstime) across
 * the run, which counts wrk once it has been waited for; no other child of this process ends
 * during a run.
 */
export async function runWrk(bin: string, run: WrkRun, ticksPerSec: number): Promise<WrkOutcome> {
  const dir = await makeTempDir('sluice-bench-wrk-');
  try {
    const script = join(dir, 'service.lua');
    await writeFile(script, SCRIPT);
    const before = await procCpu('self');
    const started = performance.now();
    const child = startChild(
      bin,
      [
        '-t1',
        `-c${run.connections}`,
        `-d${run.seconds}s`,
        '--timeout',
        '10s',
        '-s',
        script,
        `${run.url}/v1/check`,
        '--',
        run.resource,
        String(run.keys),
        String(run.batch),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout!.on('data', (c: Buffer) => (out += c.toString('utf8')));
    child.stderr!.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const timer = setTimeout(() => void stopChild(child, 1000), (run.seconds + 30) * 1000);
    try {
      const [code] = (await once(child, 'exit')) as [number | null];
      if (code !== 0) throw new Error(`wrk exited with ${code}: ${out.slice(-500)}`);
    } finally {
      clearTimeout(timer);
      await stopChild(child);
    }
    const seconds = (performance.now() - started) / 1000;
    const after = await procCpu('self');
    const cpuSec =
      before === undefined || after === undefined
        ? undefined
        : (after.childUser + after.childSystem - before.childUser - before.childSystem) / ticksPerSec;
    return { report: parseWrkReport(out), cpuSec, seconds };
  } finally {
    await removeTempDir(dir);
  }
}
