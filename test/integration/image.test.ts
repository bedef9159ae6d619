/* eslint-disable @typescript-eslint/no-explicit-any --
   the assertions read parsed JSON and protobuf answers dynamically */
/**
 * The container image built from the repository's Dockerfile (scripts/image.sh builds it before
 * the tests), run the way an operator runs it: a read-only root file system, settings from the
 * documented SLUICE_* variables, the service on the host's loopback. It must answer decisions over
 * HTTP and gRPC from Redis and from the embedded store, run as a non-root numeric user, hold
 * production dependencies only, and end with exit code 0 on SIGTERM. The image's size and its
 * time from `run` to a live `/healthz` are written to `<run dir>/image-footprint.json`
 * (docs/deploying.md quotes them).
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { freePort } from '@sluice/redis/testing';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { containerImage, podmanCommand, randomPrefix, redisUrl } from '../env.js';
import { command, type CommandResult } from '../local-registry.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PROTO_DIR = join(ROOT, 'packages/server/proto');
const image = containerImage();
/** The Dockerfile's default base (scripts/image.sh provides it where no registry is reachable). */
const BASE_IMAGE = 'docker.io/library/node:20-bookworm-slim';
const [podmanBin, ...podmanFlags] = podmanCommand();
const started: string[] = [];

function podman(...args: string[]): Promise<CommandResult> {
  return command(podmanBin!, [...podmanFlags, ...args], ROOT);
}

async function podmanOk(...args: string[]): Promise<string> {
  const r = await podman(...args);
  if (r.code !== 0) throw new Error(`podman ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.stdout.trim();
}

interface Container {
  readonly id: string;
  readonly url: string;
  readonly grpcPort: number;
  /** Milliseconds from `podman run` to the first `/healthz` answered 200. */
  readonly startupMs: number;
}

/** Starts the image with a read-only root file system on free loopback ports. */
async function run(env: Record<string, string>, extra: string[] = []): Promise<Container> {
  const [port, grpcPort] = [await freePort(), await freePort()];
  const envFlags = Object.entries({
    SLUICE_HOST: '127.0.0.1',
    SLUICE_PORT: `${port}`,
    SLUICE_GRPC_PORT: `${grpcPort}`,
    ...env,
  }).flatMap(([k, v]) => ['-e', `${k}=${v}`]);
  const t0 = performance.now();
  const id = await podmanOk(
    'run',
    '-d',
    '--label',
    'sluice.test',
    '--network',
    'host',
    '--read-only',
    ...extra,
    ...envFlags,
    image,
  );
  started.push(id);
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    const ok = await fetch(`${url}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    const state = await podmanOk('inspect', '--format', '{{.State.Status}}', id);
    if (state === 'exited' || Date.now() > deadline) {
      throw new Error(`the container did not serve (${state}): ${(await podman('logs', id)).stderr}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { id, url, grpcPort, startupMs: performance.now() - t0 };
}

/** SIGTERM, then the container's exit code and its log. */
async function terminate(c: Container): Promise<{ code: number; log: string }> {
  await podmanOk('kill', '--signal', 'TERM', c.id);
  const code = Number(await podmanOk('wait', c.id));
  const logs = await podman('logs', c.id);
  return { code, log: logs.stdout + logs.stderr };
}

async function check(c: Container, key: string, resource = 'api:payment_gateway'): Promise<{ status: number; body: any }> {
  const res = await fetch(`${c.url}/v1/check`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ resource, key }),
  });
  return { status: res.status, body: await res.json() };
}

/** One ShouldRateLimit call against the example rules' `edge` domain. */
function shouldRateLimit(c: Container, address: string): Promise<any> {
  const pkg = protoLoader.loadSync('envoy/service/ratelimit/v3/rls.proto', { includeDirs: [PROTO_DIR], enums: String });
  const method = (pkg['envoy.service.ratelimit.v3.RateLimitService'] as protoLoader.ServiceDefinition).ShouldRateLimit!;
  const client = new grpc.Client(`127.0.0.1:${c.grpcPort}`, grpc.credentials.createInsecure());
  const request = { domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value: address }] }] };
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      request,
      new grpc.Metadata(),
      (err: grpc.ServiceError | null, res?: unknown) => {
        client.close();
        if (err) reject(err);
        else resolve(res);
      },
    );
  });
}

const footprint: Record<string, number> = {};

afterAll(async () => {
  if (started.length > 0) await podman('rm', '-f', ...started);
  const dir = process.env.SLUICE_RUN_DIR;
  if (dir !== undefined && Object.keys(footprint).length > 0) {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'image-footprint.json'), `${JSON.stringify(footprint, null, 2)}\n`);
  }
});

describe('the container image', () => {
  it('runs as a numeric non-root user, so runAsNonRoot can verify it', async () => {
    expect(await podmanOk('image', 'inspect', '--format', '{{.Config.User}}', image)).toBe('1000:1000');
    const id = await podmanOk('run', '--rm', '--label', 'sluice.test', '--entrypoint', 'id', image, '-u');
    expect(id).toBe('1000');
  });

  it('holds the service and its production dependencies, no build tools', async () => {
    const modules = (
      await podmanOk(
        'run',
        '--rm',
        '--label',
        'sluice.test',
        '--entrypoint',
        'ls',
        image,
        '/app/node_modules',
        '/app/node_modules/@sluice',
      )
    ).split(/\s+/);
    for (const name of ['fastify', 'ioredis', 'server', 'core', 'redis', 'rules']) expect(modules).toContain(name);
    // The gRPC libraries are the tests' independent client; the service reads and writes its messages itself.
    for (const name of ['@grpc', 'protobufjs']) expect(modules).not.toContain(name);
    for (const name of ['typescript', 'vitest', 'eslint', 'prettier', 'verdaccio', 'playwright-core', 'gateway', 'temporal']) {
      expect(modules).not.toContain(name);
    }
    const size = Number(await podmanOk('image', 'inspect', '--format', '{{.Size}}', image));
    const baseSize = Number(await podmanOk('image', 'inspect', '--format', '{{.Size}}', BASE_IMAGE));
    footprint.addedMegabytes = Math.round((size - baseSize) / 1e6);
    expect(size).toBeGreaterThan(baseSize);
  });

  it('answers over HTTP and gRPC from Redis, writing nothing to its file system, and drains on SIGTERM', async () => {
    const prefix = randomPrefix('image');
    // Time is not the subject: a generous bound on each Redis call, so that a first call slowed
    // by a busy machine is not answered by the store-failure policy (the adaptive bound starts at 50 ms).
    const c = await run({ SLUICE_REDIS_URL: redisUrl(), SLUICE_REDIS_PREFIX: prefix, SLUICE_STORE_TIMEOUT_MS: '5000' });
    footprint.startupMsRedis = Math.round(c.startupMs);
    const http = await check(c, 'tenant-a');
    expect(http.status).toBe(200);
    expect(http.body).toMatchObject({ allowed: true, limit: 1000, source: 'store' });
    const rls = await shouldRateLimit(c, '10.0.0.1');
    expect(rls.overallCode).toBe('OK');
    expect(rls.statuses[0].currentLimit).toMatchObject({ requestsPerUnit: 10, unit: 'SECOND' });
    // The decisions were taken in Redis: the counters are there, under the container's prefix.
    const redis = new Redis(redisUrl());
    try {
      expect((await redis.keys(`${prefix}*`)).length).toBeGreaterThan(0);
    } finally {
      redis.disconnect();
    }
    const { code, log } = await terminate(c);
    expect(code).toBe(0);
    expect(log).toContain('"signal":"SIGTERM"');
    expect(log).toContain('"msg":"shut down"');
  }, 120_000);

  it('on the embedded store serves a mounted rules file and keeps its versions in the one writable volume', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-image-'));
    try {
      const rules = join(dir, 'rules.yaml');
      writeFileSync(rules, 'resources:\n  test:mounted:\n    limits: { algorithm: fixed-window, limit: 3, windowMs: 3600000 }\n');
      chmodSync(rules, 0o644);
      const c = await run({}, ['--tmpfs', '/var/lib/sluice:rw,mode=1777', '-v', `${rules}:/etc/sluice/rules.yaml:ro`]);
      footprint.startupMsEmbedded = Math.round(c.startupMs);
      const answers = [];
      for (let i = 0; i < 4; i++) answers.push((await check(c, 'tenant-b', 'test:mounted')).body.allowed);
      expect(answers).toEqual([true, true, true, false]);
      expect(await podmanOk('exec', c.id, 'ls', '/var/lib/sluice/rules')).not.toBe('');
      expect((await terminate(c)).code).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('on the embedded store without that volume, refuses to start and says why', async () => {
    const [port, grpcPort] = [await freePort(), await freePort()];
    const r = await podman(
      'run', '--rm', '--label', 'sluice.test', '--network', 'host', '--read-only',
      '-e', 'SLUICE_HOST=127.0.0.1', '-e', `SLUICE_PORT=${port}`, '-e', `SLUICE_GRPC_PORT=${grpcPort}`,
      image,
    ); // prettier-ignore
    expect(r.code).not.toBe(0);
    expect(r.stdout + r.stderr).toMatch(/SLUICE_ERR_RULE_STORE_UNAVAILABLE: .*\/var\/lib\/sluice\/rules.*writable directory/);
  }, 120_000);
});
