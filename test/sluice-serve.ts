/**
 * Runs `sluice serve` (the built CLI, so `npm run build` first) as a child process for tests that
 * need the real service: on free loopback ports by default, with a rule file of their own.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { randomPrefix, redisUrl } from './env.js';

/** The built CLI of `sluice serve`. */
export const SLUICE_BIN = fileURLToPath(new URL('../packages/server/bin/sluice.js', import.meta.url));
/** The admin bearer token every spawned service gets. */
export const TOKEN = 'test-admin-token-0123456789abcdef';

/** A scratch directory with a rules file. */
export function rulesFile(text: string): { path: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-serve-'));
  const path = join(dir, 'rules.yaml');
  writeFileSync(path, text);
  return { path, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A `sluice serve` child process. */
export interface Serve {
  readonly url: string;
  readonly grpcPort: number;
  readonly child: ChildProcess;
  /** Every log line so far. */
  readonly logs: string[];
  /** Sends `signal` (SIGTERM by default) and resolves to the exit code once the process exited. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** The parent's environment without its SLUICE_* variables (those are for the tests, not the service). */
export function childEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_')));
}

/**
 * Spawns `node packages/server/bin/sluice.js serve --host 127.0.0.1 ARGS` with {@link childEnv},
 * the admin token and `env`, and resolves once it logs that it serves.
 */
export function spawnSluice(args: readonly string[], env: Record<string, string> = {}): Promise<Serve> {
  const child = spawn(process.execPath, [SLUICE_BIN, 'serve', '--host', '127.0.0.1', ...args], {
    env: { ...childEnv(), SLUICE_ADMIN_TOKEN: TOKEN, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: string[] = [];
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    let buffered = '';
    const onLine = (line: string) => {
      logs.push(line);
      let entry: { msg?: string; url?: string; grpcPort?: number };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        return;
      }
      if (entry.msg === 'sluice serving') {
        resolve({
          url: entry.url!,
          grpcPort: entry.grpcPort!,
          child,
          logs,
          stop: (signal = 'SIGTERM') => {
            if (child.exitCode === null && child.signalCode === null) child.kill(signal);
            return exited;
          },
        });
      }
    };
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      lines.forEach(onLine);
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => logs.push(chunk));
    void exited.then((code) => reject(new Error(`sluice serve exited with ${code} before serving:\n${logs.join('\n')}`)));
  });
}

/**
 * Spawns `sluice serve --rules FILE --port P --grpc-port G [--redis URL]` and resolves once it
 * serves. Port 0 picks free ports.
 */
export function spawnServe(options: {
  rules: string;
  port?: number;
  grpcPort?: number;
  redis?: string;
  prefix?: string;
}): Promise<Serve> {
  const args = ['--rules', options.rules];
  args.push('--port', String(options.port ?? 0), '--grpc-port', String(options.grpcPort ?? 0));
  // A generous store timeout: these tests are about global decisions, and on a loaded machine a
  // Redis reply can take longer than the 50 ms default (the service would then decide locally).
  if (options.redis !== undefined) args.push('--redis', options.redis, '--store-timeout-ms', '2000');
  if (options.prefix !== undefined) args.push('--redis-prefix', options.prefix);
  return spawnSluice(args, { SLUICE_SHUTDOWN_GRACE_MS: '500' });
}

/** Where a spawned service keeps its limits: the embedded store, or the tests' Redis. */
export type TestStore = 'memory' | 'redis';

/**
 * The flags that put a spawned service on `store`: none for the embedded store; for Redis the
 * tests' server under `prefix` (a fresh one by default), with a store timeout a busy machine keeps.
 */
export function storeFlags(store: TestStore, prefix = randomPrefix('serve'), storeTimeoutMs = 2000): string[] {
  return store === 'memory'
    ? []
    : ['--redis', redisUrl(), '--redis-prefix', prefix, '--store-timeout-ms', String(storeTimeoutMs)];
}

/** Deletes the keys under `prefix` on the tests' standalone Redis. */
export async function deleteRedisKeys(prefix: string): Promise<void> {
  const redis = new Redis(redisUrl());
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      if (keys.length > 0) await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

/**
 * One sample of a service's Prometheus text at `base`: the first `name{...}` line holding every
 * `key="value"` of `labels` (comma-separated); 0 when absent.
 */
export async function metric(base: string, name: string, labels: string): Promise<number> {
  const text = await (await fetch(new URL('/metrics', base))).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && labels.split(',').every((kv) => l.includes(kv)));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}
