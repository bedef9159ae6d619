/**
 * Runs `sluice serve` (the built CLI, so `npm run build` first) as a child process for tests that
 * need the real service: on free loopback ports by default, with a rule file of their own.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

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
  readonly child: ChildProcess;
  readonly logs: string[];
  /** Sends `signal` (SIGTERM by default) and resolves once the process exited. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Spawns `node packages/server/bin/sluice.js serve --rules FILE --port P --grpc-port G [--redis URL]`
 * and resolves once it serves. Port 0 picks free ports.
 */
export function spawnServe(options: {
  rules: string;
  port?: number;
  grpcPort?: number;
  redis?: string;
  prefix?: string;
}): Promise<Serve> {
  const args = ['serve', '--host', '127.0.0.1', '--rules', options.rules];
  args.push('--port', String(options.port ?? 0), '--grpc-port', String(options.grpcPort ?? 0));
  // A generous store timeout: these tests are about global decisions, and on a loaded machine a
  // Redis reply can take longer than the 50 ms default (the service would then decide locally).
  if (options.redis !== undefined) args.push('--redis', options.redis, '--store-timeout-ms', '2000');
  if (options.prefix !== undefined) args.push('--redis-prefix', options.prefix);
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_')));
  const child = spawn(process.execPath, [SLUICE_BIN, ...args], {
    env: { ...env, SLUICE_ADMIN_TOKEN: TOKEN, SLUICE_SHUTDOWN_GRACE_MS: '500' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: string[] = [];
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return new Promise((resolve, reject) => {
    let buffered = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) {
        logs.push(line);
        let entry: { msg?: string; url?: string };
        try {
          entry = JSON.parse(line) as typeof entry;
        } catch {
          continue;
        }
        if (entry.msg === 'sluice serving') {
          resolve({
            url: entry.url!,
            child,
            logs,
            stop: async (signal = 'SIGTERM') => {
              if (child.exitCode === null && child.signalCode === null) child.kill(signal);
              await exited;
            },
          });
        }
      }
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => logs.push(chunk));
    void exited.then(() => reject(new Error(`sluice serve exited before serving:\n${logs.join('\n')}`)));
  });
}
