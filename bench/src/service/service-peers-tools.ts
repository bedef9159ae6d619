import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { access, constants, mkdir } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';

/**
 * The programs the service-peers part runs beside `sluice serve`, built from their Go modules
 * into a cache directory outside the repository (never committed), or found there from an
 * earlier run. Versions are pinned so that runs compare like with like.
 */
export const PEER_TOOLS = Object.freeze({
  /** The gRPC load generator. */
  ghz: { module: 'github.com/bojand/ghz/cmd/ghz', version: 'v0.120.0', bin: 'ghz' },
  /**
   * envoyproxy/ratelimit's service: the module has no release tags the proxy serves, so its
   * main branch is pinned by pseudo-version (`go list -m github.com/envoyproxy/ratelimit@latest`).
   */
  ratelimit: {
    module: 'github.com/envoyproxy/ratelimit/src/service_cmd',
    version: 'v1.4.1-0.20260122083618-3fb702589d36',
    bin: 'service_cmd',
  },
} as const);

export type PeerToolName = keyof typeof PEER_TOOLS;

/** A tool found or built, or why it is missing. */
export type Found = { readonly path: string } | { readonly missing: string };

/** Where tools are built: `BENCH_CACHE_DIR`, else `~/.cache/sluice-bench`. */
export function cacheDir(env: NodeJS.ProcessEnv): string {
  return env.BENCH_CACHE_DIR || join(homedir(), '.cache', 'sluice-bench');
}

async function executable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** How long a build may take (a first build downloads and compiles a few hundred packages). */
const BUILD_TIMEOUT_MS = 15 * 60_000;

/**
 * The tool's binary in `<cache>/<version>/`, built there with `go install module@version` when
 * absent; says why when it cannot be (no Go, the module not served, the build failed).
 */
export async function findOrBuild(name: PeerToolName, cache: string, progress: (line: string) => void): Promise<Found> {
  const tool = PEER_TOOLS[name];
  const dir = join(cache, 'bin', tool.version);
  const path = join(dir, tool.bin);
  if (await executable(path)) return { path };
  const go = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (go.error !== undefined || go.status !== 0) return { missing: `no Go toolchain on PATH to build ${tool.module}` };
  await mkdir(dir, { recursive: true });
  progress(`  building ${tool.module}@${tool.version} into ${dir} (once)...`);
  const child = spawn('go', ['install', `${tool.module}@${tool.version}`], {
    env: { ...process.env, GOBIN: dir, GOFLAGS: '-mod=mod' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const keep = (c: Buffer) => (out = (out + c.toString('utf8')).slice(-2000));
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const timer = setTimeout(() => child.kill('SIGKILL'), BUILD_TIMEOUT_MS);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  if (code !== 0 || !(await executable(path))) {
    const last = out.trim().split('\n').slice(-3).join(' | ');
    return { missing: `go install ${tool.module}@${tool.version} failed (exit ${code}): ${last}` };
  }
  return { path };
}

/** The wrk binary (`BENCH_WRK`, else wrk on PATH), or why there is none. */
export function findWrkBinary(wanted: string | undefined): Found {
  const bin = wanted && wanted !== 'none' ? wanted : 'wrk';
  if (wanted === 'none') return { missing: 'BENCH_WRK=none' };
  const r = spawnSync(bin, ['-v'], { encoding: 'utf8' });
  return r.error === undefined && /wrk/.test(`${r.stdout}${r.stderr}`)
    ? { path: bin }
    : { missing: `no ${bin} on PATH (Debian: apt-get install wrk; or BENCH_WRK=/path/to/wrk)` };
}
