/**
 * The probe: reports every request that passed the gateway to the event stream, without ever
 * making the request wait for it. Events are written straight into per-partition byte buffers
 * (32 bytes each, no objects), sealed into a batch when `batchSize` events are there or
 * `flushIntervalMs` after the first one, and published in the background with at most
 * `maxInFlight` publishes outstanding. Everything the probe holds is bounded by
 * `maxBufferedEvents`; past it, new events are dropped and counted, so a slow or dead stream
 * costs observability, never availability.
 *
 * Requests the gateway rejects emit no event; the probe counts them per block instead
 * ({@link Probe.reject}) and sends the counts as rejection tallies with the same flushes, so
 * the aggregators see the load a block holds back and keep the block while it lasts.
 */
import { ErrorCodes, invalid, systemClock, type Clock, type TimerHandle } from '@sluice/core';
import {
  MAX_TALLIES_PER_BATCH,
  EVENT_BYTES,
  LAYOUT_VERSION,
  MAX_EVENTS_PER_BATCH,
  batchHeaderBytes,
  partitionOf,
  saltSlotOf,
  writeEventRecord,
  writeEventsHeader,
  type AggregatorAnnouncement,
  type BatchFormat,
  type BatchLayout,
  type Dimension,
  type EventTransport,
  type GatewayEvent,
} from '@sluice/stream';
import type { DropReason, GatewayObserver, LayoutMismatch } from './observer.js';
import { fnOption, intOption } from './options.js';
import { RejectionCounter } from './rejection-counter.js';

/** Options of {@link Probe}. */
export interface ProbeOptions {
  /** Where batches are published. The probe never closes it. */
  transport: EventTransport;
  /** Events per batch; a full batch is sealed at once. @default 100 */
  batchSize?: number;
  /** Longest an event waits in a partial batch, in ms. @default 10 */
  flushIntervalMs?: number;
  /**
   * Most events held at once (being filled, waiting, or being published). Past it, new events
   * are dropped (`buffer_full`). @default 10000
   */
  maxBufferedEvents?: number;
  /** Most publishes outstanding at once. @default 4 */
  maxInFlight?: number;
  /**
   * Count rejected requests per block and send the counts (rejection tallies) to the
   * aggregators. Aggregators older than tallies count each tally batch as malformed and skip it.
   * @default true
   */
  countRejected?: boolean;
  /**
   * Most rejection counters (one per blocked value, resource and path) between two flushes, and
   * most tally records waiting to be published. Past it, rejections are not counted
   * (`rejectedDropped`). @default 1024
   */
  maxTallies?: number;
  /** How long {@link Probe.close} waits for buffered events to be published, in ms. @default 1000 */
  closeTimeoutMs?: number;
  /**
   * The batch format written. 2 carries the partition layout (the transport's partition count
   * and `LAYOUT_VERSION`) in every batch, so aggregators report a gateway that splits the stream
   * differently; 1 is the format aggregators of 0.1 read (they count format 2 batches as
   * malformed): set it while such aggregators remain.
   * @default 2
   */
  batchFormat?: BatchFormat;
  /**
   * Spreads each resource over this many consecutive partitions, rotating every `saltMs`, so a
   * hot resource does not load one aggregator only (each partition's owner then counts its share
   * of the resource; aggregators need no setting for it).
   * @default 1 (no spreading)
   */
  spread?: number;
  /** How long one salt slot lasts, in ms. @default 60000 */
  saltMs?: number;
  /** Monotonic clock for the flush timer and close bound. @default systemClock */
  clock?: Clock;
  /** Wall clock (epoch ms) stamped on events. @default Date.now */
  wallClock?: () => number;
  /** Metrics hooks. */
  observer?: GatewayObserver;
}

/** Counters of a probe, for tests and metrics. */
export interface ProbeStats {
  /** Events accepted by the stream. */
  readonly sent: number;
  /** Batches accepted by the stream. */
  readonly batches: number;
  /** Dropped events by reason. */
  readonly dropped: Readonly<Record<DropReason, number>>;
  /** Batches the transport rejected. */
  readonly publishErrors: number;
  /** Events held now (filling, waiting or in flight). */
  readonly buffered: number;
  /** Publishes outstanding now. */
  readonly inFlight: number;
  /** Rejected requests counted in tallies the stream accepted. */
  readonly rejected: number;
  /** Rejected requests not counted: the tally table was full, the publish failed, or the probe closed. */
  readonly rejectedDropped: number;
  /** Tally batches accepted by the stream. */
  readonly tallyBatches: number;
  /**
   * Aggregator announcements whose partition count or layout version differ from this probe's
   * (see {@link Probe.checkAnnouncement}): events of some partitions reach no aggregator, or the
   * wrong one.
   */
  readonly layoutMismatches: number;
  /** The last aggregator layout that differed from this probe's, if any. */
  readonly lastMismatch: LayoutMismatch | undefined;
}

/** A partition's batch being filled. */
interface Stage {
  readonly partition: number;
  readonly bytes: Uint8Array;
  readonly view: DataView;
  count: number;
}

interface Sealed {
  readonly partition: number;
  readonly bytes: Uint8Array;
  /** Events in the batch (0 for a tally batch). */
  readonly count: number;
  /** Rejected requests a tally batch counts (0 for an event batch). */
  readonly rejected: number;
}

/**
 * Batches gateway events and publishes them asynchronously, fail-open.
 *
 * @example
 * const probe = new Probe({ transport });
 * probe.emit(hashValue('orders'), hashValue('/orders/:id'), hashValue(user), 0, 0, 200, EventOutcome.PASSED);
 * await probe.close(); // publishes what is buffered, within closeTimeoutMs
 */
export class Probe {
  readonly #transport: EventTransport;
  readonly #batchSize: number;
  readonly #flushMs: number;
  readonly #maxBuffered: number;
  readonly #maxInFlight: number;
  readonly #closeTimeoutMs: number;
  readonly #spread: number;
  readonly #saltMs: number;
  readonly #clock: Clock;
  readonly #wallClock: () => number;
  readonly #observer: GatewayObserver | undefined;
  readonly #rejections: RejectionCounter | undefined;
  /** What each batch header carries (format 2), or nothing (format 1). */
  readonly #layout: BatchLayout | undefined;
  readonly #headerBytes: number;
  #layoutMismatches = 0;
  #lastMismatch: LayoutMismatch | undefined;
  /** Stages by partition, created on first use. */
  readonly #stages: (Stage | undefined)[];
  /** Stages holding at least one event, in the order they got it. */
  readonly #filling: Stage[] = [];
  readonly #queue: Sealed[] = [];
  readonly #pending = new Set<Promise<void>>();
  #flushTimer: TimerHandle | undefined;
  #buffered = 0;
  #inFlight = 0;
  #closed = false;
  #sent = 0;
  #batches = 0;
  #publishErrors = 0;
  #rejectedSent = 0;
  #rejectedDropped = 0;
  #tallyBatches = 0;
  /** Tally records sealed and not yet settled. */
  #talliesHeld = 0;
  readonly #dropped: Record<DropReason, number> = { buffer_full: 0, publish_error: 0, closed: 0, invalid: 0 };

  constructor(options: ProbeOptions) {
    const t = options.transport as EventTransport | undefined;
    if (t === undefined || typeof t.publish !== 'function' || !Number.isInteger(t.partitions) || t.partitions < 1) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'transport', 'must be an EventTransport');
    }
    this.#transport = options.transport;
    this.#batchSize = intOption(options.batchSize, 'batchSize', 100, 1, MAX_EVENTS_PER_BATCH);
    this.#flushMs = intOption(options.flushIntervalMs, 'flushIntervalMs', 10, 0, 60_000);
    this.#maxBuffered = intOption(options.maxBufferedEvents, 'maxBufferedEvents', 10_000, 1, 10_000_000);
    this.#maxInFlight = intOption(options.maxInFlight, 'maxInFlight', 4, 1, 1024);
    this.#closeTimeoutMs = intOption(options.closeTimeoutMs, 'closeTimeoutMs', 1000, 0, 600_000);
    this.#spread = intOption(options.spread, 'spread', 1, 1, this.#transport.partitions);
    this.#saltMs = intOption(options.saltMs, 'saltMs', 60_000, 1, 86_400_000);
    this.#clock = options.clock ?? systemClock;
    this.#wallClock = fnOption(options.wallClock, 'wallClock') ?? Date.now;
    this.#observer = options.observer;
    const maxTallies = intOption(options.maxTallies, 'maxTallies', 1024, 1, MAX_TALLIES_PER_BATCH);
    if (options.countRejected !== undefined && typeof options.countRejected !== 'boolean') {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'countRejected', 'must be a boolean');
    }
    const format = options.batchFormat ?? 2;
    if (format !== 1 && format !== 2)
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'batchFormat', `must be 1 or 2, got ${String(format)}`);
    this.#layout = format === 2 ? { partitions: this.#transport.partitions, version: LAYOUT_VERSION } : undefined;
    this.#headerBytes = batchHeaderBytes(this.#layout);
    this.#rejections = options.countRejected === false ? undefined : new RejectionCounter(maxTallies, this.#layout);
    this.#stages = new Array<Stage | undefined>(this.#transport.partitions);
  }

  /** Counters since the probe was created. */
  get stats(): ProbeStats {
    return {
      sent: this.#sent,
      batches: this.#batches,
      dropped: { ...this.#dropped },
      publishErrors: this.#publishErrors,
      buffered: this.#buffered,
      inFlight: this.#inFlight,
      rejected: this.#rejectedSent,
      rejectedDropped: this.#rejectedDropped,
      tallyBatches: this.#tallyBatches,
      layoutMismatches: this.#layoutMismatches,
      lastMismatch: this.#lastMismatch,
    };
  }

  /**
   * Compares an aggregator's announcement with how this probe splits the stream: a different
   * partition count or layout version is counted (`layoutMismatches`), reported to the
   * observer and returned. The events keep going where this probe puts them: an aggregator that
   * reads fewer partitions never sees those beyond its count, one that reads more expects the
   * resources elsewhere.
   */
  checkAnnouncement(a: AggregatorAnnouncement): LayoutMismatch | undefined {
    const partitions = this.#transport.partitions;
    if (a.partitions === partitions && a.layoutVersion === LAYOUT_VERSION) return undefined;
    const mismatch: LayoutMismatch = { aggregator: a.id, partitions: a.partitions, layoutVersion: a.layoutVersion };
    this.#layoutMismatches++;
    this.#lastMismatch = mismatch;
    this.#observer?.layoutMismatch?.(mismatch, { partitions, version: LAYOUT_VERSION });
    return mismatch;
  }

  /**
   * Records one request. Synchronous and allocation-free on the common path; never throws for a
   * full buffer or a down stream (the event is dropped and counted; the result is false).
   * Values must be in range (u32 hashes, resource not 0, status 0..999, outcome 0 or 1): the
   * gateway computes them; use {@link record} for events from elsewhere.
   */
  emit(resource: number, path: number, user: number, ip: number, tenant: number, status: number, outcome: number): boolean {
    return this.#write(resource, path, user, ip, tenant, this.#wallClock(), status, outcome);
  }

  /**
   * Counts one request rejected by the block on `dimension` = `value` (a hash), on `resource`
   * and `path`. Synchronous and allocation-free unless the block, resource and path are new
   * since the last flush; never throws. False when the rejection could not be counted
   * (`countRejected: false`, the tally table full, or the probe closed).
   */
  reject(resource: number, path: number, dimension: Dimension, value: number): boolean {
    const counter = this.#rejections;
    if (counter === undefined) return false;
    if (this.#closed || resource === 0 || value === 0) {
      this.#uncounted(1);
      return false;
    }
    const wall = this.#wallClock();
    const slot = this.#spread === 1 ? 0 : saltSlotOf(wall, this.#saltMs, this.#spread);
    const before = counter.size;
    if (!counter.add(resource, path, dimension, value, wall, partitionOf(resource, this.#transport.partitions, slot))) {
      this.#uncounted(1);
      return false;
    }
    if (before === 0) this.#armFlush();
    return true;
  }

  /** Records one event given as an object, keeping its timestamp. Same contract as {@link emit}. */
  record(e: GatewayEvent): boolean {
    return this.#write(e.resource, e.path, e.user, e.ip, e.tenant, e.timestampMs, e.status, e.outcome);
  }

  #write(
    resource: number,
    path: number,
    user: number,
    ip: number,
    tenant: number,
    wall: number,
    status: number,
    outcome: number,
  ): boolean {
    if (this.#closed) {
      this.#drop('closed', 1);
      return false;
    }
    if (this.#buffered >= this.#maxBuffered) {
      this.#drop('buffer_full', 1);
      return false;
    }
    // One bad record would make the whole batch undecodable: refuse it here instead.
    if (resource === 0 || !(status >= 0 && status <= 999) || (outcome !== 0 && outcome !== 1) || !(wall >= 0)) {
      this.#drop('invalid', 1);
      return false;
    }
    const slot = this.#spread === 1 ? 0 : saltSlotOf(wall, this.#saltMs, this.#spread);
    const partition = partitionOf(resource, this.#transport.partitions, slot);
    let stage = this.#stages[partition];
    if (stage === undefined) stage = this.#newStage(partition);
    if (stage.count === 0) {
      this.#filling.push(stage);
      this.#armFlush();
    }
    writeEventRecord(
      stage.view,
      this.#headerBytes + stage.count * EVENT_BYTES,
      resource,
      path,
      user,
      ip,
      tenant,
      wall,
      status,
      outcome,
    );
    stage.count++;
    this.#buffered++;
    if (stage.count >= this.#batchSize) {
      this.#seal(stage);
      this.#pump();
    }
    return true;
  }

  /** Seals every partial batch and starts publishing it now. */
  flush(): void {
    if (this.#flushTimer !== undefined) {
      this.#clock.clearTimer(this.#flushTimer);
      this.#flushTimer = undefined;
    }
    while (this.#filling.length > 0) {
      const stage = this.#filling[0]!;
      if (stage.count > 0) this.#seal(stage);
      else this.#filling.shift();
    }
    this.#sealTallies();
    this.#pump();
  }

  /**
   * Seals the rejection counters into tally batches, unless as many tally records as the table
   * holds are still waiting to be published: then the counters keep counting (nothing is lost,
   * the next tallies just cover a longer span) and the next flush tries again.
   */
  #sealTallies(): void {
    const counter = this.#rejections;
    if (counter === undefined || counter.size === 0) return;
    if (this.#talliesHeld >= counter.maxCounters && !this.#closed) {
      this.#armFlush();
      return;
    }
    this.#talliesHeld += counter.size;
    for (const t of counter.drain()) this.#queue.push({ partition: t.partition, bytes: t.bytes, count: 0, rejected: t.rejected });
  }

  /**
   * Stops accepting events, publishes what is buffered and waits for it at most
   * `closeTimeoutMs`; events still waiting after that are dropped (`closed`). Publishes already
   * in flight finish in the background and are counted when they settle. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.flush();
    if (this.#inFlight > 0 || this.#queue.length > 0) {
      let timer: TimerHandle | undefined;
      const deadline = new Promise<void>((resolve) => {
        timer = this.#clock.setTimer(resolve, this.#closeTimeoutMs, true);
      });
      while ((this.#inFlight > 0 || this.#queue.length > 0) && this.#pending.size > 0) {
        const raced = await Promise.race([Promise.race(this.#pending).then(() => false), deadline.then(() => true)]);
        if (raced) break;
      }
      if (timer !== undefined) this.#clock.clearTimer(timer);
    }
    for (const batch of this.#queue.splice(0)) {
      this.#buffered -= batch.count;
      if (batch.count > 0) this.#drop('closed', batch.count);
      else this.#uncounted(batch.rejected);
    }
  }

  #newStage(partition: number): Stage {
    const bytes = new Uint8Array(this.#headerBytes + this.#batchSize * EVENT_BYTES);
    const stage: Stage = { partition, bytes, view: new DataView(bytes.buffer), count: 0 };
    this.#stages[partition] = stage;
    return stage;
  }

  /** Hands the stage's bytes to the publish queue; the stage starts a fresh buffer next time. */
  #seal(stage: Stage): void {
    const i = this.#filling.indexOf(stage);
    if (i >= 0) this.#filling.splice(i, 1);
    writeEventsHeader(stage.view, stage.count, this.#layout);
    const size = this.#headerBytes + stage.count * EVENT_BYTES;
    const bytes = size === stage.bytes.length ? stage.bytes : stage.bytes.slice(0, size);
    this.#queue.push({ partition: stage.partition, bytes, count: stage.count, rejected: 0 });
    // A full buffer was handed over as is: the next events of the partition need a new one.
    if (bytes === stage.bytes) this.#stages[stage.partition] = undefined;
    else stage.count = 0;
  }

  #armFlush(): void {
    if (this.#flushTimer !== undefined) return;
    this.#flushTimer = this.#clock.setTimer(
      () => {
        this.#flushTimer = undefined;
        this.flush();
      },
      this.#flushMs,
      true,
    );
  }

  #pump(): void {
    while (this.#inFlight < this.#maxInFlight && this.#queue.length > 0) {
      const batch = this.#queue.shift()!;
      this.#inFlight++;
      const startedAt = this.#observer?.published === undefined ? 0 : this.#clock.now();
      let publishing: Promise<void>;
      try {
        publishing = this.#transport.publish(batch.partition, batch.bytes);
      } catch (err) {
        publishing = Promise.reject(err instanceof Error ? err : new Error(String(err)));
      }
      const settled: Promise<void> = Promise.resolve(publishing).then(
        () => this.#settle(settled, batch, undefined, startedAt),
        (err: unknown) => this.#settle(settled, batch, err ?? new Error('publish rejected'), startedAt),
      );
      this.#pending.add(settled);
    }
  }

  #settle(settled: Promise<void>, batch: Sealed, error: unknown, startedAt: number): void {
    this.#pending.delete(settled);
    if (this.#observer?.published !== undefined) this.#observer.published(this.#clock.now() - startedAt, error);
    this.#inFlight--;
    this.#buffered -= batch.count;
    if (batch.count === 0) this.#talliesHeld -= tallyRecords(batch.bytes);
    if (error === undefined) {
      if (batch.count > 0) {
        this.#sent += batch.count;
        this.#batches++;
        this.#observer?.batchSent?.(batch.count);
      } else {
        this.#rejectedSent += batch.rejected;
        this.#tallyBatches++;
        this.#observer?.rejectionsTallied?.(batch.rejected);
      }
    } else {
      this.#publishErrors++;
      this.#observer?.publishFailed?.(error);
      if (batch.count > 0) this.#drop('publish_error', batch.count);
      else this.#uncounted(batch.rejected);
    }
    this.#pump();
  }

  #uncounted(count: number): void {
    this.#rejectedDropped += count;
    this.#observer?.rejectionsUncounted?.(count);
  }

  #drop(reason: DropReason, count: number): void {
    this.#dropped[reason] += count;
    this.#observer?.eventsDropped?.(reason, count);
  }
}

/** Records in a sealed tally batch (its header's count). */
function tallyRecords(bytes: Uint8Array): number {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(4);
}
