import { createHash } from 'node:crypto';
import { CancelledFailure } from '@temporalio/common';
import type { Context } from '@temporalio/activity';
import { ErrorCodes, SluiceError, isSluiceError, type Decision, type TryOptions } from '@sluice/core';
import { INPUT_ERROR_CODES, invalidRequestFailure, limiterFaultFailure, rateLimitedFailure } from './failures.js';
import type { SluiceCallContext } from './headers.js';
import {
  compileActivityOptions,
  type CompiledActivityOptions,
  type CompiledPermit,
  type SluiceActivityOptions,
} from './options.js';
import type { PermitEvent } from './observer.js';
import { DeliveryDelay } from './delivery-delay.js';
import { reportAttempt } from './outcomes.js';
import { bookedRetryDelayMs, retryDelayMs } from './retry-delay.js';

/** What a waiting (or just admitted) activity reports in its heartbeat details, under `sluice`. */
export interface PermitHeartbeat {
  /** `waiting_for_permit` while blocked; `permitted` once admitted; `limiter_fault` when the limiter failed. */
  readonly state: 'waiting_for_permit' | 'permitted' | 'limiter_fault';
  readonly activityType: string;
  readonly resource: string;
  /** How long the activity has waited so far. */
  readonly waitedMs: number;
  /** The most it will wait (its bound, cut to the remaining timeout budget). */
  readonly maxWaitMs?: number;
  /** Who decided: `store` (global), `fallback` (the store-failure policy), ... */
  readonly source?: string;
  /** The limiter's error, for `limiter_fault`. */
  readonly error?: string;
}

/** The shape of heartbeat details the gate sends. */
export interface PermitHeartbeatDetails {
  readonly sluice: PermitHeartbeat;
}

/** A permit taken for one resource, to renew and give back. */
interface Held {
  readonly permit: CompiledPermit;
  readonly options: TryOptions;
  readonly permitId: string | undefined;
}

/**
 * Takes the permits an activity needs before its code runs, holds concurrency permits while it
 * runs (renewing them) and gives them back on every exit. The activity interceptor and
 * {@link SluiceActivityGate.wrap} both run through it.
 */
export class SluiceActivityGate {
  readonly options: CompiledActivityOptions;
  /** How late this worker's retries arrive, for the lead of booked retries. */
  readonly deliveryDelay = new DeliveryDelay();

  constructor(options: SluiceActivityOptions | CompiledActivityOptions) {
    this.options =
      'activities' in options && options.activities instanceof Map
        ? (options as CompiledActivityOptions)
        : compileActivityOptions(options as SluiceActivityOptions);
  }

  /** The permits configured for an activity type (none: the activity runs ungated). */
  permitsFor(activityType: string): readonly CompiledPermit[] | undefined {
    return this.options.activities.get(activityType);
  }

  /**
   * Runs `next` once every permit is granted. Denials throw a retryable `SluiceRateLimited`
   * ApplicationFailure; cancellation while waiting throws a `CancelledFailure`.
   *
   * @param startedAt when the attempt started (wall clock), for the start-to-close budget
   */
  async run<T>(
    ctx: Context,
    activityType: string,
    permits: readonly CompiledPermit[],
    args: readonly unknown[],
    call: SluiceCallContext,
    startedAt: number,
    next: () => Promise<T>,
  ): Promise<T> {
    const held: Held[] = [];
    if (ctx.info.attempt > 1) this.deliveryDelay.record(startedAt - ctx.info.currentAttemptScheduledTimestampMs);
    try {
      for (const [index, permit] of permits.entries()) {
        const h = await this.#take(ctx, activityType, permit, index, args, call, startedAt);
        if (h !== undefined) held.push(h);
      }
    } catch (err) {
      // All-or-nothing: a later denial gives back what earlier resources granted.
      await this.#giveBack(ctx, activityType, held, true);
      throw err;
    }
    const stopRenewal = this.#renew(ctx, activityType, held);
    const outcomeOf = this.options.outcomeOf;
    const ranAt = this.options.now();
    try {
      const result = await next();
      if (outcomeOf !== undefined) reportAttempt(this.options.limiter, permits, args, 'success', this.options.now() - ranAt);
      return result;
    } catch (err) {
      if (outcomeOf !== undefined) reportAttempt(this.options.limiter, permits, args, outcomeOf(err), this.options.now() - ranAt);
      throw err;
    } finally {
      stopRenewal();
      await this.#giveBack(ctx, activityType, held, false);
    }
  }

  async #take(
    ctx: Context,
    activityType: string,
    permit: CompiledPermit,
    index: number,
    args: readonly unknown[],
    call: SluiceCallContext,
    startedAt: number,
  ): Promise<Held | undefined> {
    const { limiter, observer } = this.options;
    const { resource } = permit;
    const event: PermitEvent = { activityType, resource };
    let options: TryOptions;
    try {
      const priority = permit.priority?.(args) ?? call.priority;
      const tenant = permit.tenant?.(args) ?? call.tenant;
      options = {
        ...(permit.key === undefined ? {} : { key: permit.key(args) }),
        cost: permit.cost(args),
        ...(priority === undefined ? {} : { priority }),
        ...(tenant === undefined ? {} : { tenant }),
      };
    } catch (err) {
      const e = err instanceof Error ? err : new Error(String(err));
      throw invalidRequestFailure(resource, e);
    }
    let decision: Decision;
    try {
      decision =
        permit.mode === 'blocking'
          ? await this.#wait(ctx, activityType, permit, options, startedAt)
          : this.options.booking && limiter.book !== undefined
            ? await this.#book(ctx, activityType, permit, index, options, startedAt)
            : await limiter.try(resource, options);
    } catch (err) {
      if (ctx.cancellationSignal.aborted || isSluiceError(err, ErrorCodes.ABORTED)) {
        throw new CancelledFailure('cancelled while waiting for a rate-limit permit', [], err instanceof Error ? err : undefined);
      }
      if (err instanceof SluiceError && INPUT_ERROR_CODES.has(err.code)) throw invalidRequestFailure(resource, err);
      observer?.fault?.({ ...event, kind: 'error' });
      const message = err instanceof Error ? err.message : String(err);
      heartbeat(ctx, { state: 'limiter_fault', activityType, resource, waitedMs: 0, error: message });
      if (permit.onLimiterFault === 'open') {
        ctx.log.warn('limiter failed; running without a permit (onLimiterFault: open)', { resource, error: message });
        return undefined;
      }
      ctx.log.warn('limiter failed; failing the attempt (onLimiterFault: closed)', { resource, error: message });
      throw limiterFaultFailure(resource, err, this.options.faultRetryDelayMs);
    }
    if (decision.source === 'fallback') {
      observer?.fault?.({ ...event, kind: 'fallback' });
      heartbeat(ctx, {
        state: decision.allowed ? 'permitted' : 'limiter_fault',
        activityType,
        resource,
        waitedMs: decision.waitedMs ?? 0,
        source: 'fallback',
        error: 'the limit store is unavailable; the resource store-failure policy decided',
      });
    }
    if (!decision.allowed) {
      observer?.denied?.({ ...event, reason: decision.reason });
      const delayMs = decision.booking?.outcome === 'booked' ? this.bookedRetryDelay(decision) : this.retryDelay(decision);
      observer?.retryScheduled?.({ ...event, delayMs });
      throw rateLimitedFailure(resource, decision, delayMs);
    }
    if (decision.permitId !== undefined) observer?.permitHeld?.({ ...event, delta: 1 });
    return { permit, options, permitId: decision.permitId };
  }

  /** Waits for a permit, heartbeating, within the activity's remaining budget. */
  async #wait(
    ctx: Context,
    activityType: string,
    permit: CompiledPermit,
    options: TryOptions,
    startedAt: number,
  ): Promise<Decision> {
    const { limiter, observer, now } = this.options;
    const { resource } = permit;
    const began = now();
    const budget = remainingBudget(ctx, startedAt, began) - this.options.budgetMarginMs;
    const maxWaitMs = Math.max(0, Math.min(permit.maxWaitMs, Math.floor(budget)));
    if (maxWaitMs === 0) return limiter.try(resource, options);
    const details = (): PermitHeartbeat => ({
      state: 'waiting_for_permit',
      activityType,
      resource,
      waitedMs: Math.max(0, now() - began),
      maxWaitMs,
    });
    // The first heartbeat comes one interval in: an immediate answer (granted, or a wait that
    // cannot fit the budget) never leaves a stale "waiting" behind.
    const timeoutMs = ctx.info.heartbeatTimeoutMs;
    const every = Math.max(10, Math.min(this.options.heartbeatIntervalMs, timeoutMs ? Math.floor(timeoutMs / 3) : Infinity));
    const timer = setInterval(() => heartbeat(ctx, details()), every);
    timer.unref();
    let outcome: 'granted' | 'timeout' | 'cancelled' | 'error' = 'error';
    try {
      const d = await limiter.acquire(resource, { ...options, maxWaitMs, signal: ctx.cancellationSignal });
      outcome = d.allowed ? 'granted' : 'timeout';
      if (d.allowed) {
        // Later heartbeats (or none) must not leave "waiting" as the last word in `describe`.
        heartbeat(ctx, { state: 'permitted', activityType, resource, waitedMs: now() - began, source: d.source ?? 'store' });
      }
      return d;
    } catch (err) {
      if (isSluiceError(err, ErrorCodes.ABORTED) || ctx.cancellationSignal.aborted) outcome = 'cancelled';
      throw err;
    } finally {
      clearInterval(timer);
      observer?.waited?.({ activityType, resource, waitedMs: Math.max(0, now() - began), outcome });
    }
  }

  /**
   * Admits, claims the attempt's booking, or books its slot (see `RateLimiter.book`). The
   * booking is named after the activity, so every attempt names the same one. A slot within
   * `maxSlotWaitMs` (and the attempt's budget) is waited for here and claimed; a later one is
   * left to the retry. Cancellation while waiting cancels the booking.
   */
  async #book(
    ctx: Context,
    activityType: string,
    permit: CompiledPermit,
    index: number,
    options: TryOptions,
    startedAt: number,
  ): Promise<Decision> {
    const { limiter, now } = this.options;
    const { resource } = permit;
    const id = bookingId(ctx, index);
    const token = bookingToken(ctx, index);
    const book = async (): Promise<Decision> => {
      try {
        return await limiter.book!(resource, { ...options, id, token });
      } catch (err) {
        // The service holds this client's most bookings: retried as without bookings.
        if (isSluiceError(err) && (err.code as string) === BOOKING_LIMIT) return limiter.try(resource, options);
        throw err;
      }
    };
    let d = await book();
    // A claim that came a little early asks again after the rest; a few rounds at most.
    for (let round = 0; round < 3 && !d.allowed && d.booking?.outcome === 'booked'; round++) {
      const wait = d.booking.startsInMs;
      const budget = remainingBudget(ctx, startedAt, now()) - this.options.budgetMarginMs;
      if (wait > this.options.maxSlotWaitMs || wait > budget) break;
      heartbeat(ctx, {
        state: 'waiting_for_permit',
        activityType,
        resource,
        waitedMs: Math.max(0, now() - startedAt),
        maxWaitMs: wait,
      });
      try {
        await ctx.sleep(wait);
      } catch (err) {
        await limiter.cancel?.(resource, { key: options.key, id, token }).catch(() => false);
        throw err;
      }
      d = await book();
    }
    this.options.observer?.booked?.({
      activityType,
      resource,
      outcome: d.booking?.outcome ?? (d.allowed ? 'admitted' : 'denied'),
    });
    return d;
  }

  /**
   * `nextRetryDelay` for a booked denial: its slot's start, less the lead that lets Temporal's
   * late delivery still arrive in time (the attempt then waits the rest); see `retry-delay.ts`.
   */
  bookedRetryDelay(decision: Decision): number {
    const lead = this.options.retryLeadMs ?? this.deliveryDelay.estimate();
    return bookedRetryDelayMs(decision.retryAfterMs, lead, this.options.minRetryDelayMs);
  }

  /**
   * `nextRetryDelay` for a denial: its retry-after (at least the minimum), plus jitter; the
   * workflow helper sleeps by the same rule (`retry-delay.ts`).
   */
  retryDelay(decision: Decision): number {
    const { minRetryDelayMs, retryJitter, random } = this.options;
    return retryDelayMs(decision.retryAfterMs, { minMs: minRetryDelayMs, jitter: retryJitter, random });
  }

  /** Renews held concurrency permits until stopped; a lost permit is logged. */
  #renew(ctx: Context, activityType: string, held: readonly Held[]): () => void {
    const timers: NodeJS.Timeout[] = [];
    let stopped = false;
    for (const h of held) {
      if (h.permitId === undefined) continue;
      const permitId = h.permitId;
      const tick = async (): Promise<void> => {
        try {
          const still = await this.options.limiter.renew(h.permit.resource, { key: h.options.key, permitId });
          if (!still) ctx.log.warn('concurrency permit expired before the activity finished', { resource: h.permit.resource });
        } catch (err) {
          this.options.observer?.fault?.({ activityType, resource: h.permit.resource, kind: 'error' });
          ctx.log.warn('could not renew a concurrency permit', { resource: h.permit.resource, error: String(err) });
        }
      };
      // Chained timeouts, so a slow renewal never overlaps the next one.
      const schedule = (): void => {
        if (stopped) return;
        const t = setTimeout(() => {
          void tick().finally(schedule);
        }, h.permit.renewIntervalMs);
        t.unref();
        timers.push(t);
      };
      schedule();
    }
    return () => {
      stopped = true;
      for (const t of timers) clearTimeout(t);
    };
  }

  /** Releases concurrency permits; `refund` also returns rate permits (nothing was called). */
  async #giveBack(ctx: Context, activityType: string, held: readonly Held[], refund: boolean): Promise<void> {
    const { limiter, observer } = this.options;
    for (const h of held) {
      const { resource } = h.permit;
      try {
        if (h.permitId !== undefined) {
          observer?.permitHeld?.({ activityType, resource, delta: -1 });
          await limiter.release(resource, { key: h.options.key, permitId: h.permitId });
        }
        // Nothing was called: the rate limits get their permits back too (a no-op for
        // concurrency-only resources).
        if (refund && (h.options.cost ?? 1) > 0) {
          // The tenant's quota was charged with the resource: it gets its permits back too.
          const tenant = h.options.tenant;
          await limiter.adjust(resource, {
            key: h.options.key,
            delta: -(h.options.cost ?? 1),
            ...(tenant === undefined ? {} : { tenant }),
          });
        }
      } catch (err) {
        // The lease expires on its own after its TTL; never let a release mask the result.
        observer?.fault?.({ activityType, resource, kind: 'error' });
        ctx.log.warn('could not give a permit back', { resource, error: String(err) });
      }
    }
  }
}

/**
 * The booking an activity's attempts share: named after its workflow run, activity id and the
 * permit's place in its list, hashed to a fixed length.
 */
function bookingId(ctx: Context, index: number): string {
  const { workflowExecution, activityId } = ctx.info;
  const name = `${workflowExecution?.workflowId ?? ''}\n${workflowExecution?.runId ?? ''}\n${activityId}\n${index}`;
  return `t:${createHash('sha256').update(name).digest('base64url')}`;
}

/**
 * The token of that booking, which every attempt shows to claim it: derived (apart from the id)
 * from the same names, so attempts on any worker agree without passing it along. The run id is
 * a random UUID: the token is as hard to guess as the run is to see.
 */
function bookingToken(ctx: Context, index: number): string {
  const { workflowExecution, activityId } = ctx.info;
  const name = `sluice booking token\n${workflowExecution?.workflowId ?? ''}\n${workflowExecution?.runId ?? ''}\n${activityId}\n${index}`;
  return `k:${createHash('sha256').update(name).digest('base64url')}`;
}

/** The service's refusal of a booking past its bound per client (`SLUICE_ERR_BOOKING_LIMIT`). */
const BOOKING_LIMIT = 'SLUICE_ERR_BOOKING_LIMIT';

/** Milliseconds left before the attempt's start-to-close or the schedule-to-close deadline. */
export function remainingBudget(ctx: Pick<Context, 'info'>, startedAt: number, now: number): number {
  const { startToCloseTimeoutMs, scheduleToCloseTimeoutMs, scheduledTimestampMs } = ctx.info;
  let deadline = Infinity;
  if (startToCloseTimeoutMs > 0) deadline = Math.min(deadline, startedAt + startToCloseTimeoutMs);
  if (scheduleToCloseTimeoutMs > 0) deadline = Math.min(deadline, scheduledTimestampMs + scheduleToCloseTimeoutMs);
  return deadline - now;
}

function heartbeat(ctx: Context, state: PermitHeartbeat): void {
  try {
    ctx.heartbeat({ sluice: state } satisfies PermitHeartbeatDetails);
  } catch {
    // Local activities and finished contexts may refuse heartbeats; a wait goes on regardless.
  }
}
