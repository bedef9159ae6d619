/**
 * Times a limiter's calls to its store for `LimiterObserver.storeCalled`. Only calls that leave
 * the process are timed: a store that decides in it (the in-memory store, the fallback) makes no
 * round trip, and its calls are neither timed nor reported.
 */
import type { Clock } from '../shared/clock.js';
import { MemoryStore } from './memory-store.js';
import type { LimitStore, StoreCall, StoreOperation } from './store.js';

/** Reports a call started at `startedAt` (the clock's) and settled now, with its error if it failed. */
export type StoreCallTimer = (operation: StoreOperation, startedAt: number, error?: unknown) => void;

/**
 * The timer of `store`'s calls, reporting to `report`; undefined (nothing to time, nothing to
 * pay) without `report` or for a store that decides in this process.
 */
export function storeCallTimer(
  store: LimitStore,
  clock: Clock,
  report: ((call: StoreCall) => void) | undefined,
): StoreCallTimer | undefined {
  if (report === undefined || store instanceof MemoryStore) return undefined;
  return (operation, startedAt, error) => {
    const durationMs = clock.now() - startedAt;
    report(error === undefined ? { operation, durationMs } : { operation, durationMs, error });
  };
}

/** `call()` timed as `operation` by `timer` (as it is, without an async frame, without one). */
export function timedCall<T>(
  timer: StoreCallTimer | undefined,
  clock: Clock,
  operation: StoreOperation,
  call: () => Promise<T>,
): Promise<T> {
  return timer === undefined ? call() : timed(timer, clock.now(), operation, call);
}

async function timed<T>(timer: StoreCallTimer, startedAt: number, operation: StoreOperation, call: () => Promise<T>): Promise<T> {
  try {
    const result = await call();
    timer(operation, startedAt);
    return result;
  } catch (err) {
    timer(operation, startedAt, err ?? new Error('the store call failed'));
    throw err;
  }
}
