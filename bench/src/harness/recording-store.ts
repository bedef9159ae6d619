import type {
  AdjustRequest,
  ConsumeRequest,
  ConsumeResult,
  PermitRequest,
  LimitStore,
  ReserveRequest,
  ReserveResult,
} from '@sluice/core';

/** Passes every call to `inner`; subclasses override the calls they watch. */
class ForwardingStore implements LimitStore {
  protected readonly inner: LimitStore;

  constructor(inner: LimitStore) {
    this.inner = inner;
  }

  get name(): string {
    return this.inner.name;
  }

  consume(request: ConsumeRequest): Promise<ConsumeResult> {
    return this.inner.consume(request);
  }

  adjust(request: AdjustRequest): Promise<void> {
    return this.inner.adjust(request);
  }

  reserve(request: ReserveRequest): Promise<ReserveResult> {
    return this.inner.reserve(request);
  }

  renew(request: PermitRequest): Promise<boolean> {
    return this.inner.renew(request);
  }

  release(request: PermitRequest): Promise<boolean> {
    return this.inner.release(request);
  }

  ping(): Promise<void> {
    return this.inner.ping();
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  // The store's peer count and connection reports size and drive the limiter's fallback: a
  // wrapper that dropped them would leave the limiter with the whole limit as its share.
  get peers(): LimitStore['peers'] {
    return this.inner.peers;
  }

  watchConnection(listener: (up: boolean, error?: unknown) => void): () => void {
    return this.inner.watchConnection?.(listener) ?? (() => undefined);
  }
}

/**
 * Passes every call to `inner` and reports the store-clock time of each admitted `consume`
 * (Redis `TIME` for the Redis store), so accuracy can be judged on the clock that decided,
 * free of the callers' queueing.
 */
export class RecordingStore extends ForwardingStore {
  readonly #onAdmitted: (decidedAt: number) => void;

  constructor(inner: LimitStore, onAdmitted: (decidedAt: number) => void) {
    super(inner);
    this.#onAdmitted = onAdmitted;
  }

  override async consume(request: ConsumeRequest): Promise<ConsumeResult> {
    const result = await this.inner.consume(request);
    if (result.allowed) this.#onAdmitted(result.now);
    return result;
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
export class CountingStore extends ForwardingStore {
  readonly calls: StoreCalls = { consume: 0, reserve: 0, granted: 0, adjust: 0 };

  override consume(request: ConsumeRequest): Promise<ConsumeResult> {
    this.calls.consume++;
    return this.inner.consume(request);
  }

  override adjust(request: AdjustRequest): Promise<void> {
    this.calls.adjust++;
    return this.inner.adjust(request);
  }

  override async reserve(request: ReserveRequest): Promise<ReserveResult> {
    this.calls.reserve++;
    const result = await this.inner.reserve(request);
    this.calls.granted += result.granted;
    return result;
  }
}
