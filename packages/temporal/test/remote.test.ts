/**
 * The activity interceptor with the remote client: permits decided by a spawned `sluice serve`
 * (built CLI) through `RemoteLimiter`, against the real Temporal server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { RemoteLimiter } from '@sluice/client';
import type { Client } from '@temporalio/client';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { bundleWorkflows, connectClient, randomId, temporalAddress } from './helpers.js';
import { withWorker } from './worker-in-process.js';

const SLUICE_BIN = fileURLToPath(new URL('../../server/bin/sluice.js', import.meta.url));
const RULES = `resources:
  api:remote: { limits: { algorithm: token-bucket, limit: 4, windowMs: 60000, burst: 4 } }
  api:paced: { limits: { algorithm: token-bucket, limit: 2, windowMs: 1000, burst: 1 } }
`;

/** Starts `sluice serve` on free loopback ports; resolves with its URL once it serves. */
async function serve(rules: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(
    process.execPath,
    [SLUICE_BIN, 'serve', '--host', '127.0.0.1', '--rules', rules, '--port', '0', '--grpc-port', '0'],
    {
      env: {
        ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_'))),
        SLUICE_ADMIN_TOKEN: 'temporal-test-admin-token-0123456789',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const logs: string[] = [];
  child.stderr.on('data', (d: Buffer) => logs.push(d.toString()));
  const deadline = setTimeout(() => child.kill('SIGKILL'), 30_000);
  try {
    for await (const line of createInterface({ input: child.stdout })) {
      logs.push(String(line));
      try {
        const entry = JSON.parse(String(line)) as { msg?: string; url?: string };
        if (entry.msg === 'sluice serving' && entry.url) return { url: entry.url, child };
      } catch {
        // not a log line
      }
    }
  } finally {
    clearTimeout(deadline);
  }
  throw new Error(`sluice serve exited before serving:\n${logs.join('\n')}`);
}

let bundle: WorkflowBundleWithSourceMap;
let client: Client;
let closeClient: () => Promise<void>;
let server: { url: string; child: ChildProcess };
let dir: string;

beforeAll(async () => {
  temporalAddress();
  dir = mkdtempSync(join(tmpdir(), 'sluice-temporal-remote-'));
  writeFileSync(join(dir, 'rules.yaml'), RULES);
  [bundle, server] = await Promise.all([bundleWorkflows(), serve(join(dir, 'rules.yaml'))]);
  ({ client, close: closeClient } = await connectClient());
});

afterAll(async () => {
  await closeClient?.();
  if (server && server.child.exitCode === null) {
    const exited = once(server.child, 'exit');
    server.child.kill('SIGTERM');
    await exited;
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('with RemoteLimiter over sluice serve', () => {
  it('admits what the service allows and retries the rest later (non-blocking)', async () => {
    const limiter = new RemoteLimiter({ url: server.url, checkTimeoutMs: 1000 });
    try {
      expect(await limiter.ready()).toBe(true);
      await withWorker(
        bundle,
        { limiter, mode: 'non-blocking', activities: { callShared: { resource: 'api:remote' } } },
        async (taskQueue, calls) => {
          const handle = await client.workflow.start('fanOut', {
            taskQueue,
            workflowId: randomId('remote'),
            args: [{ activity: 'callShared', count: 6 }],
          });
          const deadline = Date.now() + 15_000;
          let pending = 0;
          while (Date.now() < deadline) {
            const d = await handle.describe();
            pending = (d.raw.pendingActivities ?? []).filter(
              (p) => p.lastFailure?.applicationFailureInfo?.type === 'SluiceRateLimited',
            ).length;
            if (calls.ran.length >= 4 && pending >= 2) break;
            await new Promise((r) => setTimeout(r, 100));
          }
          expect(calls.ran).toHaveLength(4);
          expect(pending).toBe(2);
          await handle.terminate();
        },
      );
    } finally {
      await limiter.close();
    }
  });

  it('waits on the service in blocking mode', async () => {
    const limiter = new RemoteLimiter({ url: server.url, checkTimeoutMs: 1000 });
    try {
      expect(await limiter.ready()).toBe(true);
      await withWorker(bundle, { limiter, activities: { callShared: { resource: 'api:paced' } } }, async (taskQueue, calls) => {
        const handle = await client.workflow.start('fanOut', {
          taskQueue,
          workflowId: randomId('paced'),
          args: [{ activity: 'callShared', count: 3 }],
        });
        await handle.result();
        expect(calls.ran).toHaveLength(3);
        expect(calls.ran.every((c) => c.attempt === 1)).toBe(true);
      });
    } finally {
      await limiter.close();
    }
  });
});
