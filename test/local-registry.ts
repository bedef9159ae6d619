/**
 * A throwaway npm registry (verdaccio) on loopback, owned by one test file: the workspace
 * packages are published to it and installed from it the way a user installs them. Packages
 * outside the @sluice scope are proxied from the public registry.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort } from '@sluice/redis/testing';

const run = promisify(execFile);
const VERDACCIO_BIN = fileURLToPath(new URL('../node_modules/verdaccio/bin/verdaccio', import.meta.url));

export interface CommandResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a command to its end; a non-zero exit is a result, not an exception. */
export async function command(file: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<CommandResult> {
  try {
    const { stdout, stderr } = await run(file, args, { cwd, env: { ...process.env, ...env }, maxBuffer: 64 << 20 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number | string; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : 1, stdout: e.stdout ?? '', stderr: e.stderr ?? String(err) };
  }
}

export class LocalRegistry {
  readonly #child: ChildProcess;
  readonly #dir: string;
  /** An npm user config with a token for this registry (it accepts any for @sluice/*). */
  readonly npmrc: string;

  private constructor(
    readonly url: string,
    dir: string,
    child: ChildProcess,
  ) {
    this.#dir = dir;
    this.#child = child;
    this.npmrc = join(dir, 'npmrc');
    writeFileSync(this.npmrc, `registry=${url}/\n${url.replace(/^http:/, '')}/:_authToken=local-test\n`);
  }

  static async start(): Promise<LocalRegistry> {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-registry-'));
    const port = await freePort();
    writeFileSync(
      join(dir, 'config.yaml'),
      [
        `storage: ${join(dir, 'storage')}`,
        'auth:',
        '  htpasswd:',
        `    file: ${join(dir, 'htpasswd')}`,
        '    max_users: -1',
        'uplinks:',
        '  npmjs:',
        '    url: https://registry.npmjs.org/',
        '    cache: false',
        '    timeout: 60s',
        'packages:',
        "  '@sluice/*':",
        '    access: $all',
        '    publish: $anonymous',
        "  '**':",
        '    access: $all',
        '    proxy: npmjs',
        'log: { type: stdout, format: json, level: error }',
        '',
      ].join('\n'),
    );
    const url = `http://127.0.0.1:${port}`;
    const child = spawn(
      process.execPath,
      [VERDACCIO_BIN, '--config', join(dir, 'config.yaml'), '--listen', `127.0.0.1:${port}`],
      {
        stdio: 'ignore',
      },
    );
    const registry = new LocalRegistry(url, dir, child);
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`verdaccio exited with ${child.exitCode} before it listened`);
      try {
        const res = await fetch(`${url}/-/ping`);
        if (res.ok) return registry;
      } catch {
        // Not listening yet.
      }
      if (Date.now() > deadline) {
        await registry.close();
        throw new Error(`verdaccio did not answer on ${url} within 60 s`);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** `npm <args>` against this registry, with this registry's token. */
  npm(args: string[], cwd: string): Promise<CommandResult> {
    return command('npm', [...args, '--registry', `${this.url}/`, '--userconfig', this.npmrc, '--no-audit', '--no-fund'], cwd, {
      npm_config_update_notifier: 'false',
    });
  }

  async close(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      const exited = once(this.#child, 'exit');
      this.#child.kill('SIGTERM');
      await exited;
    }
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
