/**
 * Helpers of the Temporal integration tests: server addresses from the environment (failing
 * loudly when missing), the workflow bundle, and worker processes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { Connection, Client, type WorkflowHandle } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';

import { temporalAddress } from '../../../test/env.js';

export { redisUrl, temporalAddress } from '../../../test/env.js';

/** A random suffix for task queues, key prefixes and workflow ids. */
export function randomId(label: string): string {
  return `${label}-${Math.random().toString(36).slice(2, 10)}`;
}

export const workflowsPath = fileURLToPath(new URL('./fixtures/workflows.js', import.meta.url));
const workerPath = fileURLToPath(new URL('./fixtures/worker.js', import.meta.url));
/** The workflow-side interceptor module, resolved like users do (the built package). */
export const WORKFLOW_INTERCEPTORS = '@sluice/temporal/workflow';

const silent = { log() {}, info() {}, warn() {}, error() {}, debug() {}, trace() {} };

/** Bundles the fixture workflows with the Sluice workflow interceptors. */
export async function bundleWorkflows(): Promise<WorkflowBundleWithSourceMap> {
  return bundleWorkflowCode({ workflowsPath, workflowInterceptorModules: [WORKFLOW_INTERCEPTORS], logger: silent });
}

/** Writes a bundle to a temp file, for worker processes (`workflowBundle: { codePath }`). */
export function writeBundle(bundle: WorkflowBundleWithSourceMap): { path: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-temporal-'));
  const path = join(dir, 'workflows.js');
  writeFileSync(path, bundle.code);
  return { path, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A client of the test server. */
export async function connectClient(): Promise<{ client: Client; close: () => Promise<void> }> {
  const connection = await Connection.connect({ address: temporalAddress() });
  return { client: new Client({ connection, namespace: 'default' }), close: () => connection.close() };
}

/** A line a worker process printed. */
export interface WorkerEvent {
  event: string;
  at: number;
  pid: number;
  id?: string;
}

/** A worker process running test/fixtures/worker.js. */
export class WorkerProcess {
  readonly events: WorkerEvent[] = [];
  readonly #child: ChildProcess;
  readonly #stderr: string[] = [];
  readonly #exited: Promise<unknown>;

  constructor(config: object) {
    this.#child = spawn(process.execPath, [workerPath, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#exited = once(this.#child, 'exit');
    createInterface({ input: this.#child.stdout! }).on('line', (line) => {
      try {
        this.events.push(JSON.parse(line) as WorkerEvent);
      } catch {
        // SDK log lines are not events.
      }
    });
    createInterface({ input: this.#child.stderr! }).on('line', (line) => {
      if (this.#stderr.length < 200) this.#stderr.push(line);
    });
  }

  get pid(): number {
    return this.#child.pid!;
  }

  /** Resolves when the worker polls; rejects with its stderr if it exits first. */
  async ready(timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.events.some((e) => e.event === 'ready')) {
      if (this.#child.exitCode !== null || this.#child.signalCode !== null || Date.now() > deadline) {
        throw new Error(`worker ${this.pid} did not start:\n${this.#stderr.join('\n')}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** SIGKILL: the process dies holding whatever it holds. */
  async kill(): Promise<void> {
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return;
    this.#child.kill('SIGKILL');
    await this.#exited;
  }

  /** Graceful shutdown (SIGTERM), then SIGKILL if it lingers. */
  async stop(): Promise<void> {
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return;
    this.#child.kill('SIGTERM');
    const t = setTimeout(() => this.#child.kill('SIGKILL'), 10_000);
    await this.#exited;
    clearTimeout(t);
  }
}

/** Decodes the `details` payloads of a pending activity (as `describe` returns them). */
export function decodePayloads(payloads: readonly unknown[] | null | undefined): unknown[] {
  return (payloads ?? []).map((p) =>
    defaultPayloadConverter.fromPayload(p as Parameters<typeof defaultPayloadConverter.fromPayload>[0]),
  );
}

/** The most admissions in any window of `windowMs` (sliding over the sorted times). */
export function maxInWindow(times: readonly number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let best = 0;
  let lo = 0;
  for (let hi = 0; hi < sorted.length; hi++) {
    while (sorted[hi]! - sorted[lo]! >= windowMs) lo++;
    best = Math.max(best, hi - lo + 1);
  }
  return best;
}

/** Workflow handles' results, all at once. */
export async function resultsOf<T>(handles: readonly WorkflowHandle[]): Promise<T[]> {
  return Promise.all(handles.map((h) => h.result() as Promise<T>));
}
