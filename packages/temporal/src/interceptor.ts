import { Context } from '@temporalio/activity';
import type {
  ActivityExecuteInput,
  ActivityInboundCallsInterceptor,
  ActivityInterceptorsFactory,
  Next,
} from '@temporalio/worker';
import { SluiceActivityGate } from './gate.js';
import { readContextHeaders, type SluiceCallContext } from './headers.js';
import { compilePermits, type ActivityPermit, type SluiceActivityOptions } from './options.js';

/** What the interceptor learnt about a running activity, for {@link wrapActivity}. */
interface Seen extends SluiceCallContext {
  readonly startedAt: number;
  /** True when the interceptor already took this activity's permits. */
  readonly gated: boolean;
}

const seen = new WeakMap<Context, Seen>();

/**
 * Takes permits for mapped activity types before they run; passes the workflow's priority and
 * tenant (from the `sluice-*` headers) to the limiter.
 */
export class SluiceActivityInboundInterceptor implements ActivityInboundCallsInterceptor {
  readonly #gate: SluiceActivityGate;
  readonly #ctx: Context;
  readonly #startedAt: number;

  constructor(gate: SluiceActivityGate, ctx: Context) {
    this.#gate = gate;
    this.#ctx = ctx;
    // The factory runs as the attempt starts: its start-to-close budget counts from here.
    this.#startedAt = gate.options.now();
  }

  async execute(input: ActivityExecuteInput, next: Next<ActivityInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    const call = readContextHeaders(input.headers);
    const activityType = this.#ctx.info.activityType;
    const permits = this.#gate.permitsFor(activityType);
    seen.set(this.#ctx, { ...call, startedAt: this.#startedAt, gated: permits !== undefined });
    if (permits === undefined) return next(input);
    return this.#gate.run(this.#ctx, activityType, permits, input.args, call, this.#startedAt, () => next(input));
  }
}

/**
 * Worker interceptors that gate activities by the configuration. Validates it at once: a
 * missing limiter, an unknown resource or an invalid cost throws a `SluiceError` naming the
 * activity, so a misconfigured worker fails at start.
 *
 * @example
 * const worker = await Worker.create({
 *   taskQueue: 'orders',
 *   activities,
 *   interceptors: createSluiceInterceptors({
 *     limiter,
 *     activities: { chargeCard: { resource: 'api:payments' }, syncUser: { resource: 'db:user_center', cost: 2 } },
 *   }),
 * });
 */
export function createSluiceInterceptors(options: SluiceActivityOptions | SluiceActivityGate): {
  activity: ActivityInterceptorsFactory[];
} {
  const gate = options instanceof SluiceActivityGate ? options : new SluiceActivityGate(options);
  return { activity: [(ctx) => ({ inbound: new SluiceActivityInboundInterceptor(gate, ctx) })] };
}

/**
 * Gates one activity function instead of mapping its type in the configuration: permits are
 * taken before `fn` runs and given back after. Priority and tenant come from the headers when
 * the interceptors are installed too (they do not gate the activity twice).
 *
 * @example
 * const gate = new SluiceActivityGate({ limiter });
 * const activities = { chargeCard: wrapActivity(gate, { resource: 'api:payments', mode: 'non-blocking' }, chargeCard) };
 */
export function wrapActivity<A extends unknown[], R>(
  gate: SluiceActivityGate,
  permits: ActivityPermit | readonly ActivityPermit[],
  fn: (...args: A) => Promise<R>,
): (...args: A) => Promise<R> {
  const name = fn.name || 'wrapped activity';
  const o = gate.options;
  const compiled = compilePermits(o.limiter, name, permits, `wrap(${name})`, o);
  return async (...args: A): Promise<R> => {
    const ctx = Context.current();
    const s = seen.get(ctx);
    if (s?.gated) return fn(...args);
    const call: SluiceCallContext = s ?? {};
    return gate.run(ctx, ctx.info.activityType, compiled, args, call, s?.startedAt ?? o.now(), () => fn(...args));
  };
}
