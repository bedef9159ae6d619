/**
 * Counts the requests a gateway rejects, per block: one counter per (blocked value, resource,
 * path) between two flushes, so a flood of any size costs one map lookup and an increment per
 * rejected request and a few tally records per flush (see `@sluice/stream`'s tally batches).
 */
import {
  MAX_TALLY_COUNT,
  TALLY_BYTES,
  batchHeaderBytes,
  writeTalliesHeader,
  type BatchLayout,
  writeTallyRecord,
  type Dimension,
  type RejectionTally,
} from '@sluice/stream';

/** One counter: a tally being filled, and the partition it goes to. */
interface Counter extends RejectionTally {
  readonly partition: number;
}

/** A tally batch ready to publish. */
export interface TallyBatch {
  readonly partition: number;
  readonly bytes: Uint8Array;
  /** Rejected requests the batch counts. */
  readonly rejected: number;
}

/**
 * The counters of one probe, bounded by `maxCounters` distinct counters between drains: past
 * it, {@link add} refuses (the caller counts the rejection as not tallied).
 */
export class RejectionCounter {
  readonly maxCounters: number;
  /** What the tally batches' headers carry (format 2), or nothing (format 1). */
  readonly #layout: BatchLayout | undefined;
  /** Counters by blocked value (as int32), each list short: one per resource and path seen. */
  #byValue = new Map<number, Counter[]>();
  #size = 0;

  constructor(maxCounters: number, layout?: BatchLayout) {
    this.maxCounters = maxCounters;
    this.#layout = layout;
  }

  /** Distinct counters now. */
  get size(): number {
    return this.#size;
  }

  /**
   * Counts one rejected request at `wall` (epoch ms); `partition` is where the request's event
   * would have gone. False when a new counter was needed and the table is full, or the counter
   * is full (it is sealed at the next drain, long before that can happen at any real rate).
   */
  add(resource: number, path: number, dimension: Dimension, value: number, wall: number, partition: number): boolean {
    const key = value | 0;
    let list = this.#byValue.get(key);
    if (list !== undefined) {
      for (let i = 0; i < list.length; i++) {
        const c = list[i]!;
        if (c.resource !== resource || c.path !== path || c.dimension !== dimension) continue;
        if (c.count >= MAX_TALLY_COUNT) return false;
        c.count++;
        if (wall > c.lastMs) {
          c.spanMs += wall - c.lastMs;
          c.lastMs = wall;
        }
        return true;
      }
    }
    if (this.#size >= this.maxCounters) return false;
    if (list === undefined) {
      list = [];
      this.#byValue.set(key, list);
    }
    list.push({ resource, path, dimension, value, count: 1, lastMs: wall, spanMs: 0, partition });
    this.#size++;
    return true;
  }

  /** Encodes every counter into one tally batch per partition and empties the table. */
  drain(): TallyBatch[] {
    if (this.#size === 0) return [];
    const byPartition = new Map<number, Counter[]>();
    for (const list of this.#byValue.values()) {
      for (const c of list) {
        let p = byPartition.get(c.partition);
        if (p === undefined) byPartition.set(c.partition, (p = []));
        p.push(c);
      }
    }
    this.#byValue = new Map();
    this.#size = 0;
    const out: TallyBatch[] = [];
    for (const [partition, counters] of byPartition) {
      // maxCounters is at most MAX_TALLIES_PER_BATCH, so one batch per partition always fits.
      const header = batchHeaderBytes(this.#layout);
      const bytes = new Uint8Array(header + counters.length * TALLY_BYTES);
      const view = new DataView(bytes.buffer);
      writeTalliesHeader(view, counters.length, this.#layout);
      let rejected = 0;
      for (let i = 0; i < counters.length; i++) {
        writeTallyRecord(view, header + i * TALLY_BYTES, counters[i]!);
        rejected += counters[i]!.count;
      }
      out.push({ partition, bytes, rejected });
    }
    return out;
  }
}
