import type { BatchLayout, Dimension } from '@sluice/stream';

/**
 * Why the probe dropped events instead of sending them:
 * - `buffer_full`: the bounded buffer was full (the stream is slow or down);
 * - `publish_error`: the transport rejected the batch;
 * - `closed`: the probe was closed (or its close bound ran out) before the events were sent;
 * - `invalid`: the event had a field out of range (resource 0, status above 999, ...).
 */
export type DropReason = 'buffer_full' | 'publish_error' | 'closed' | 'invalid';

/** Every {@link DropReason}. */
export const DROP_REASONS: readonly DropReason[] = Object.freeze(['buffer_full', 'publish_error', 'closed', 'invalid'] as const);

/** An aggregator that splits the stream otherwise than the probe does. */
export interface LayoutMismatch {
  /** The aggregator's id. */
  readonly aggregator: string;
  /** Partitions it reads. */
  readonly partitions: number;
  /** Its layout version. */
  readonly layoutVersion: number;
}

/** Who answered a request with 429: a cached governance block, or an exact limiter. */
export type BlockSource = Dimension | 'limiter';

/**
 * Hooks for metrics. Every method is optional and is called synchronously on the request path
 * or the probe's publish path, so implementations must be cheap and must not throw.
 */
export interface GatewayObserver {
  /** A batch of `events` events was accepted by the stream. */
  batchSent?(events: number): void;
  /** `count` events were dropped. */
  eventsDropped?(reason: DropReason, count: number): void;
  /** The transport rejected a batch (its events are also reported as dropped). */
  publishFailed?(error: unknown): void;
  /**
   * A batch (of events or of rejection tallies) was published, or failed to be (`error`), after
   * `durationMs` from the transport's call to its answer, on the probe's clock (read only while
   * this hook is set).
   */
  published?(durationMs: number, error?: unknown): void;
  /** A tally batch counting `rejected` rejected requests was accepted by the stream. */
  rejectionsTallied?(rejected: number): void;
  /** `count` rejected requests could not be counted (tally table full, publish failed, probe closed). */
  rejectionsUncounted?(count: number): void;
  /** A request was answered 429 by the gateway. */
  requestBlocked?(source: BlockSource): void;
  /** A decision (block or lift) was applied to the local cache. */
  decisionApplied?(action: 'block' | 'lift'): void;
  /** A decision message could not be decoded and was skipped. */
  decisionMalformed?(error: unknown): void;
  /**
   * An aggregator announced that it splits the stream otherwise (`aggregator`) than this
   * gateway's probe (`own`): another partition count or layout version.
   */
  layoutMismatch?(aggregator: LayoutMismatch, own: BatchLayout): void;
  /** The number of active blocks in the local cache changed. */
  blocksChanged?(size: number): void;
  /** The exact limiter failed; the request was let through. */
  limiterFailed?(error: unknown): void;
}
