/* eslint-disable @typescript-eslint/no-explicit-any --
   the assertions read parsed JSON and protobuf answers dynamically */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { RedisServer } from '@sluice/redis/testing';
import { loadSettings, startServer, type RunningServer, type SettingFlags } from '@sluice/server';
import { Cluster, type Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll } from 'vitest';
import { SLUICE_BIN, TOKEN, childEnv, spawnSluice, type Serve } from '../../../test/sluice-serve.js';
import { loadOutcomesDefinition, loadRlsDefinition } from './proto.js';

export { TOKEN };
export { PROTO_LOADER_OPTIONS, loadOutcomesDefinition, loadRlsDefinition } from './proto.js';

/** A scratch directory removed by the returned function. */
export function scratch(): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-server-'));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Writes `text` to `dir/name` and returns the path. */
export function writeRules(dir: string, text: string, name = 'rules.yaml'): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

/** A running server with both listeners open (what {@link startTestServer} starts). */
export type TestServer = RunningServer & { readonly url: string; readonly httpPort: number; readonly grpcPort: number };

/** A server in this process on free ports, quiet, with the test token; flags override. */
export async function startTestServer(flags: SettingFlags): Promise<TestServer> {
  const settings = loadSettings(
    { host: '127.0.0.1', port: '0', grpcPort: '0', adminToken: TOKEN, logLevel: 'silent', ...flags },
    // The test environment's SLUICE_* variables are for the tests, not for the server.
    {},
  );
  const server = await startServer(settings, { logger: pino({ level: process.env.SLUICE_TEST_LOG_LEVEL ?? 'silent' }) });
  if (server.url === undefined || server.httpPort === undefined || server.grpcPort === undefined) {
    throw new Error('startTestServer: both listeners must be open');
  }
  return server as TestServer;
}

/** JSON over HTTP; never throws for a status. */
export async function call(
  base: string,
  path: string,
  body?: unknown,
  options: { token?: string; method?: string; signal?: AbortSignal } = {},
): Promise<{ status: number; json: any; headers: Headers }> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  const res = await fetch(new URL(path, base), {
    method: options.method ?? (body === undefined ? 'GET' : 'POST'),
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json, headers: res.headers };
}

/** Polls `probe` until it returns true; fails after `timeoutMs` (a bound on a hang, not a timed assertion). */
export async function eventually(probe: () => Promise<boolean>, timeoutMs = 20_000, intervalMs = 25): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await probe()) return;
    if (Date.now() > deadline) throw new Error('condition not met before the deadline');
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * One `Outcomes/Report` call on `port` with `authorization` metadata (if any); resolves to the
 * answer, or to `{ error }` with the gRPC status, its details and the Sluice code.
 */
export function reportOutcomes(port: number, outcomes: object[], authorization?: string): Promise<any> {
  const method = loadOutcomesDefinition().Report!;
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  if (authorization !== undefined) metadata.set('authorization', authorization);
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      method.path,
      (b: object) => method.requestSerialize(b),
      (b: Buffer) => method.responseDeserialize(b),
      { outcomes },
      metadata,
      (err: grpc.ServiceError | null, res?: unknown) => {
        client.close();
        resolve(
          err ? { error: { code: err.code, details: err.details, sluice: err.metadata?.get('sluice-error-code')[0] } } : res,
        );
      },
    );
  });
}

/** An Envoy-style client of RateLimitService. */
export class RlsClient {
  readonly #client: grpc.Client;
  readonly #method = loadRlsDefinition().ShouldRateLimit!;
  readonly #metadata = new grpc.Metadata();

  /** `authorization`: the metadata value every call carries (e.g. `Bearer <token>`). */
  constructor(target: string, authorization?: string) {
    this.#client = new grpc.Client(target, grpc.credentials.createInsecure());
    if (authorization !== undefined) this.#metadata.set('authorization', authorization);
  }

  /** Resolves to the response, or to `{ error }` with the gRPC status and Sluice code. */
  shouldRateLimit(request: object): Promise<any> {
    return this.raw(this.#method.requestSerialize(request));
  }

  /** Sends bytes as they are, as the request message. */
  raw(bytes: Buffer): Promise<any> {
    return new Promise((resolve) => {
      this.#client.makeUnaryRequest(
        this.#method.path,
        (b: Buffer) => b,
        (b: Buffer) => this.#method.responseDeserialize(b),
        bytes,
        this.#metadata,
        (err: grpc.ServiceError | null, res?: unknown) =>
          resolve(
            err ? { error: { code: err.code, details: err.details, sluice: err.metadata?.get('sluice-error-code')[0] } } : res,
          ),
      );
    });
  }

  close(): void {
    this.#client.close();
  }
}

/** A `sluice serve` child process. */
export type ServerProcess = Serve;

/**
 * Starts `sluice serve ARGS` on free ports; resolves once it serves. The environment is the
 * parent's without its SLUICE_* variables, plus `env`.
 */
export function spawnServer(args: readonly string[], env: Record<string, string> = {}): Promise<ServerProcess> {
  return spawnSluice(['--port', '0', '--grpc-port', '0', ...args], env);
}

/** Runs the CLI to completion. */
export function runCli(
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [SLUICE_BIN, ...args], {
      env: { ...childEnv(), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

/** Flags that make a spawned server follow rollouts quickly: read every 100 ms, decider's leadership 2 s. */
export const FAST_ROLLOUT = ['--rollout-poll-ms', '100', '--rollout-leadership-ms', '2000', '--store-timeout-ms', '2000'];

/** A call to `s`'s admin API (`/v1/admin<path>`) with the admin token. */
export function admin(s: ServerProcess, path: string, body?: unknown) {
  return call(s.url, `/v1/admin${path}`, body, { token: TOKEN });
}

/** A `sluice serve` on a Redis of its own ({@link serveOnOwnRedis}); set once the suite's `beforeAll` ran. */
export interface OwnRedisServer {
  redis: RedisServer;
  server: ServerProcess;
}

/**
 * In a `describe` block: starts a Redis of its own (which the tests may kill and restart) and a
 * `sluice serve` on it with `rules`, before the block's tests, and stops both after them. A
 * generous store timeout: on a busy machine a slow reply must not look like an outage.
 */
export function serveOnOwnRedis(rules: string): OwnRedisServer {
  const tmp = scratch();
  const own = {} as OwnRedisServer;
  beforeAll(async () => {
    own.redis = await RedisServer.start();
    own.server = await spawnServer([
      '--redis',
      own.redis.url,
      '--rules',
      writeRules(tmp.dir, rules),
      '--store-timeout-ms',
      '2000',
    ]);
  });
  afterAll(async () => {
    await own.server?.stop();
    await own.redis?.stop();
    tmp.remove();
  });
  return own;
}

/** Deletes the keys under `prefix` on a Redis or on every master of a cluster (once it is ready). */
export async function deleteKeys(client: Redis | Cluster, prefix: string): Promise<void> {
  if (client instanceof Cluster && client.status !== 'ready') await once(client, 'ready');
  const nodes = client instanceof Cluster ? client.nodes('master') : [client];
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      // One key at a time: in a cluster the keys of one call must share a slot.
      for (const key of keys) await node.del(key);
    } while (cursor !== '0');
  }
}
