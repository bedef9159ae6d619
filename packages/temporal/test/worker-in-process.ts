/**
 * An in-process worker for tests that need to see inside the activity (its heartbeats, its
 * metrics) rather than a fleet: the real server, the bundled fixture workflows.
 */
import { DefaultLogger, NativeConnection, Runtime, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { RateLimiter } from '@sluice/core';
import { Context } from '@temporalio/activity';
import { createSluiceInterceptors, createSluicePermitActivities, type SluiceActivityOptions } from '@sluice/temporal';
import { randomId, temporalAddress } from './helpers.js';

let runtimeInstalled = false;

/** What the fixture activities saw: the time each call ran, by activity type. */
export interface Calls {
  readonly ran: { type: string; at: number; attempt: number; workflowId: string }[];
}

/** The activities the fixture workflows call, recording each run into `calls`. */
export function fixtureActivities(limiter: RateLimiter, calls: Calls): Record<string, (...args: never[]) => Promise<unknown>> {
  const record = async (): Promise<{ at: number; pid: number }> => {
    const info = Context.current().info;
    const at = Date.now();
    calls.ran.push({ type: info.activityType, at, attempt: info.attempt, workflowId: info.workflowExecution?.workflowId ?? '' });
    return { at, pid: process.pid };
  };
  return {
    callShared: record,
    callOther: record,
    ...(createSluicePermitActivities(limiter) as unknown as Record<string, (...args: never[]) => Promise<unknown>>),
  };
}

/** Runs `fn` while a worker polls a fresh task queue with the given Sluice options (and `extra` activities). */
export async function withWorker<T>(
  bundle: WorkflowBundleWithSourceMap,
  options: SluiceActivityOptions,
  fn: (taskQueue: string, calls: Calls) => Promise<T>,
  extra: Record<string, (...args: never[]) => Promise<unknown>> = {},
): Promise<T> {
  if (!runtimeInstalled) {
    Runtime.install({ logger: new DefaultLogger('ERROR') });
    runtimeInstalled = true;
  }
  const connection = await NativeConnection.connect({ address: temporalAddress() });
  const taskQueue = randomId('q');
  const calls: Calls = { ran: [] };
  try {
    const worker = await Worker.create({
      connection,
      taskQueue,
      workflowBundle: bundle,
      activities: { ...fixtureActivities(options.limiter, calls), ...extra },
      interceptors: createSluiceInterceptors(options),
    });
    return await worker.runUntil(fn(taskQueue, calls));
  } finally {
    await connection.close();
  }
}
