/**
 * Sluice inside workflow code. This entry runs in Temporal's workflow sandbox: it imports only
 * `@temporalio/workflow`, `@temporalio/common` and this package's workflow-safe modules
 * (`headers`, `permit-protocol`, `retry-delay`), never Node or Redis.
 *
 * - `interceptors`: register this module in `interceptors.workflowModules` so every activity a
 *   workflow schedules carries its priority and tenant in headers.
 * - `withSluiceContext`: sets priority/tenant for the calls made inside a function; the
 *   workflow's memo `sluice: { priority, tenant }` sets the default for the whole workflow.
 * - `acquirePermit`: waits for a permit deterministically: a local activity asks the limiter once,
 *   the workflow sleeps (a durable timer) for the retry-after, and asks again.
 *
 * @example
 * import { acquirePermit, withSluiceContext } from '@sluice/temporal/workflow';
 * export async function syncOrders(batch: string[]) {
 *   const permit = await acquirePermit('db:user_center', { cost: batch.length });
 *   if (!permit.allowed) return 'deferred';
 *   await withSluiceContext({ priority: 'core', tenant: 'acme' }, () => activities.chargeCard(batch));
 * }
 */
import {
  AsyncLocalStorage,
  proxyLocalActivities,
  sleep,
  workflowInfo,
  type ActivityInput,
  type LocalActivityInput,
  type LocalActivityOptions,
  type Next,
  type WorkflowInterceptorsFactory,
  type WorkflowOutboundCallsInterceptor,
} from '@temporalio/workflow';
import { isPriority, isTenant, withContextHeaders, type SluiceCallContext } from './headers.js';
import {
  PERMIT_ACTIVITY,
  RELEASE_ACTIVITY,
  type PermitAnswer,
  type PermitRequest,
  type ReleaseRequest,
} from './permit-protocol.js';
import { retryDelayMs } from './retry-delay.js';

export {
  PRIORITY_HEADER,
  TENANT_HEADER,
  isPriority,
  isTenant,
  readContextHeaders,
  withContextHeaders,
  type SluiceCallContext,
  type SluicePriority,
} from './headers.js';
export {
  PERMIT_ACTIVITY,
  RELEASE_ACTIVITY,
  type PermitAnswer,
  type PermitRequest,
  type ReleaseRequest,
} from './permit-protocol.js';

const storage = new AsyncLocalStorage<SluiceCallContext>();

/** The workflow-wide default: the memo's `sluice` entry, when valid. */
function memoContext(): SluiceCallContext {
  const entry = workflowInfo().memo?.sluice as Record<string, unknown> | undefined;
  if (typeof entry !== 'object' || entry === null) return {};
  return {
    ...(isPriority(entry.priority) ? { priority: entry.priority } : {}),
    ...(isTenant(entry.tenant) ? { tenant: entry.tenant } : {}),
  };
}

/** Priority and tenant in effect here: the innermost `withSluiceContext`, else the memo's. */
export function currentSluiceContext(): SluiceCallContext {
  return storage.getStore() ?? memoContext();
}

/**
 * Runs `fn` with calls marked by `context` (merged over the current one): every activity it
 * schedules carries that priority and tenant to the limiter.
 */
export function withSluiceContext<T>(context: SluiceCallContext, fn: () => Promise<T>): Promise<T> {
  if (context.priority !== undefined && !isPriority(context.priority)) {
    throw new TypeError('withSluiceContext: priority must be a tier name (1 to 64 of A-Z a-z 0-9 _ . : -)');
  }
  if (context.tenant !== undefined && !isTenant(context.tenant)) {
    throw new TypeError("withSluiceContext: tenant must be 1 to 128 characters without '|'");
  }
  return storage.run({ ...currentSluiceContext(), ...context }, fn);
}

/** Adds the `sluice-priority` / `sluice-tenant` headers to every activity the workflow schedules. */
export class SluiceWorkflowOutboundInterceptor implements WorkflowOutboundCallsInterceptor {
  async scheduleActivity(
    input: ActivityInput,
    next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>,
  ): Promise<unknown> {
    return next({ ...input, headers: withContextHeaders(input.headers, currentSluiceContext()) });
  }

  async scheduleLocalActivity(
    input: LocalActivityInput,
    next: Next<WorkflowOutboundCallsInterceptor, 'scheduleLocalActivity'>,
  ): Promise<unknown> {
    return next({ ...input, headers: withContextHeaders(input.headers, currentSluiceContext()) });
  }
}

/** The factory Temporal looks for in a module listed in `interceptors.workflowModules`. */
export const interceptors: WorkflowInterceptorsFactory = () => ({ outbound: [new SluiceWorkflowOutboundInterceptor()] });

/** Options of {@link acquirePermit}. */
export interface AcquirePermitOptions {
  /** Sub-key within the resource; leave it out for the resource's one shared limit (an empty key is refused). */
  key?: string;
  /** @default 1 */
  cost?: number;
  /** @default the current context's (see {@link withSluiceContext}) */
  priority?: SluiceCallContext['priority'];
  /** @default the current context's */
  tenant?: string;
  /**
   * Longest wait (workflow time); past it the answer is a denial with reason `wait_timeout`.
   * @default 600000
   */
  maxWaitMs?: number;
  /** Shortest sleep between two asks, in ms. @default 100 */
  minSleepMs?: number;
  /** Jitter added to each sleep, as a fraction of it (0..1). @default 0.2 */
  jitter?: number;
  /** Options of the local activity that asks the limiter. @default startToCloseTimeout 10 s */
  localActivityOptions?: LocalActivityOptions;
}

/** The answer of {@link acquirePermit}: the last decision and the workflow time spent waiting. */
export interface PermitGrant extends PermitAnswer {
  readonly waitedMs: number;
  /** How many times the limiter was asked. */
  readonly asks: number;
}

/** Bound on asks per `acquirePermit`, so a long wait cannot grow the history without limit. */
const MAX_ASKS = 1000;

/**
 * Waits for permits from workflow code, deterministically: the limiter's answers are recorded
 * in the history (local activity results) and waits are durable timers, so a replay takes the
 * same path. Denied after `maxWaitMs` (reason `wait_timeout`); never throws for being limited.
 * Needs `createSluicePermitActivities(limiter)` registered on the worker.
 */
export async function acquirePermit(resource: string, options: AcquirePermitOptions = {}): Promise<PermitGrant> {
  const context = currentSluiceContext();
  const priority = options.priority ?? context.priority;
  const tenant = options.tenant ?? context.tenant;
  const request: PermitRequest = {
    resource,
    ...(options.key === undefined ? {} : { key: options.key }),
    cost: options.cost ?? 1,
    ...(priority === undefined ? {} : { priority }),
    ...(tenant === undefined ? {} : { tenant }),
  };
  const maxWaitMs = options.maxWaitMs ?? 600_000;
  const minSleepMs = options.minSleepMs ?? 100;
  const jitter = options.jitter ?? 0.2;
  const ask = proxyLocalActivities<{ [PERMIT_ACTIVITY]: (r: PermitRequest) => Promise<PermitAnswer> }>({
    startToCloseTimeout: '10s',
    ...options.localActivityOptions,
  })[PERMIT_ACTIVITY];
  // Date.now() and Math.random() are deterministic inside the workflow sandbox.
  const started = Date.now();
  for (let asks = 1; ; asks++) {
    const answer = await ask(request);
    const waitedMs = Date.now() - started;
    if (answer.allowed) return { ...answer, waitedMs, asks };
    const delay = retryDelayMs(answer.retryAfterMs, { minMs: minSleepMs, jitter, random: () => Math.random() });
    if (waitedMs + delay > maxWaitMs || asks >= MAX_ASKS) return { ...answer, reason: 'wait_timeout', waitedMs, asks };
    await sleep(delay);
  }
}

/**
 * Gives back a concurrency permit taken by {@link acquirePermit}: `permitId` is its answer's
 * `leaseId` (set when the resource has a concurrency limit; the recorded name stays for replay).
 */
export async function releasePermit(
  resource: string,
  permitId: string,
  options: { key?: string; localActivityOptions?: LocalActivityOptions } = {},
): Promise<boolean> {
  const release = proxyLocalActivities<{ [RELEASE_ACTIVITY]: (r: ReleaseRequest) => Promise<boolean> }>({
    startToCloseTimeout: '10s',
    ...options.localActivityOptions,
  })[RELEASE_ACTIVITY];
  // The activity's input is recorded in the history: its field keeps the name `leaseId`.
  return release({ resource, ...(options.key === undefined ? {} : { key: options.key }), leaseId: permitId });
}
