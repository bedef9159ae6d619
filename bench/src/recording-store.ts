import type { AdjustRequest, ConsumeRequest, ConsumeResult, LeaseRequest, LimitStore } from '@sluice/core';

/**
 * Passes every call to `inner` and reports the store-clock time of each admitted `consume`
 * (Redis `TIME` for the Redis store), so accuracy can be judged on the clock that decided,
 * free of the callers' queueing.
 */
export class RecordingStore implements LimitStore {
  readonly #inner: LimitStore;
  readonly #onAdmitted: (decidedAt: number) => void;

  constructor(inner: LimitStore, onAdmitted: (decidedAt: number) => void) {
    this.#inner = inner;
    this.#onAdmitted = onAdmitted;
  }

  get name(): string {
    return this.#inner.name;
  }

  async consume(request: ConsumeRequest): Promise<ConsumeResult> {
    const result = await this.#inner.consume(request);
    if (result.allowed) this.#onAdmitted(result.now);
    return result;
  }

  adjust(request: AdjustRequest): Promise<void> {
    return this.#inner.adjust(request);
  }

  reserve(request: Parameters<LimitStore['reserve']>[0]): ReturnType<LimitStore['reserve']> {
    return this.#inner.reserve(request);
  }

  renew(request: LeaseRequest): Promise<boolean> {
    return this.#inner.renew(request);
  }

  release(request: LeaseRequest): Promise<boolean> {
    return this.#inner.release(request);
  }

  ping(): Promise<void> {
    return this.#inner.ping();
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}

/** Calls a {@link CountingStore} passed on, by method. */
export interface StoreCalls {
  consume: number;
  reserve: number;
  /** Permits granted by `reserve` calls. */
  granted: number;
  adjust: number;
}

/** Passes every call to `inner` and counts them, e.g. the lease refills of a limiter. */
export class CountingStore implements LimitStore {
  readonly #inner: LimitStore;
  readonly calls: StoreCalls = { consume: 0, reserve: 0, granted: 0, adjust: 0 };

  constructor(inner: LimitStore) {
    this.#inner = inner;
  }

  get name(): string {
    return this.#inner.name;
  }

  consume(request: ConsumeRequest): Promise<ConsumeResult> {
    this.calls.consume++;
    return this.#inner.consume(request);
  }

  adjust(request: AdjustRequest): Promise<void> {
    this.calls.adjust++;
    return this.#inner.adjust(request);
  }

  async reserve(request: Parameters<LimitStore['reserve']>[0]): ReturnType<LimitStore['reserve']> {
    this.calls.reserve++;
    const result = await this.#inner.reserve(request);
    this.calls.granted += result.granted;
    return result;
  }

  renew(request: LeaseRequest): Promise<boolean> {
    return this.#inner.renew(request);
  }

  release(request: LeaseRequest): Promise<boolean> {
    return this.#inner.release(request);
  }

  ping(): Promise<void> {
    return this.#inner.ping();
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}
