import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseMachineStat, parseProcStat, type MachineCpu, type ProcCpu } from './service-measure.js';

/**
 * Every child process the service part starts (the server, wrk, load clients), so that each is
 * ended by its PID on failure and on a signal, whichever way the part stops.
 */
const live = new Set<ChildProcess>();

/** How long a child may take to exit after SIGTERM before it gets SIGKILL. */
const TERM_GRACE_MS = 5000;

/** Starts a child process and tracks it until it exits. */
export function startChild(command: string, args: readonly string[], options: SpawnOptions): ChildProcess {
  const child = spawn(command, args, options);
  live.add(child);
  child.once('exit', () => live.delete(child));
  // A spawn failure (e.g. ENOENT) is reported through 'exit'/'error'; the caller awaits one of them.
  child.once('error', () => live.delete(child));
  return child;
}

/** Tracks a child started elsewhere (e.g. with `fork`). */
export function trackChild(child: ChildProcess): ChildProcess {
  live.add(child);
  child.once('exit', () => live.delete(child));
  child.once('error', () => live.delete(child));
  return child;
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** Sends a signal to a PID; a process that is already gone is not an error. */
function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

/** Ends a child: SIGTERM to its PID, SIGKILL after a grace period; resolves once it has exited. */
export async function stopChild(child: ChildProcess, graceMs = TERM_GRACE_MS): Promise<void> {
  if (child.pid === undefined || exited(child)) {
    live.delete(child);
    return;
  }
  const gone = once(child, 'exit').then(() => undefined);
  signal(child.pid, 'SIGTERM');
  const timer = setTimeout(() => {
    if (!exited(child) && child.pid !== undefined) signal(child.pid, 'SIGKILL');
  }, graceMs);
  try {
    await gone;
  } finally {
    clearTimeout(timer);
    live.delete(child);
  }
}

/** Temporary directories of the service part not yet removed. */
const dirs = new Set<string>();

/** Makes a temporary directory that {@link removeTempDir} or {@link stopServiceChildren} removes. */
export async function makeTempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  dirs.add(dir);
  return dir;
}

export async function removeTempDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  dirs.delete(dir);
}

/**
 * Ends every child of the service part still running and removes its temporary directories (on
 * a failure or a signal).
 */
export async function stopServiceChildren(): Promise<void> {
  await Promise.allSettled([...live].map((c) => stopChild(c, 1000)));
  await Promise.allSettled([...dirs].map((d) => removeTempDir(d)));
}

/** CPU times of a process, from /proc (Linux); undefined where there is no /proc. */
export async function procCpu(pid: number | 'self'): Promise<ProcCpu | undefined> {
  try {
    return parseProcStat(await readFile(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/**
 * CPU times of a process and its children (`sluice serve --workers`: the primary and its
 * workers), from /proc (Linux); undefined where there is no /proc.
 */
export async function treeCpu(pid: number): Promise<ProcCpu | undefined> {
  const own = await procCpu(pid);
  if (own === undefined) return undefined;
  let user = own.user;
  let system = own.system;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let text: string;
    try {
      text = await readFile(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // ended meanwhile
    }
    // Field 4, the parent's PID, follows the state after the parenthesised command name.
    const ppid = Number(
      text
        .slice(text.lastIndexOf(')') + 1)
        .trim()
        .split(/\s+/)[1],
    );
    if (ppid !== pid) continue;
    const child = parseProcStat(text);
    user += child.user;
    system += child.system;
  }
  return { ...own, user, system };
}

/** CPU times of the whole machine, from /proc/stat (Linux); undefined where there is none. */
export async function machineCpu(): Promise<MachineCpu | undefined> {
  try {
    return parseMachineStat(await readFile('/proc/stat', 'utf8'));
  } catch {
    return undefined;
  }
}
