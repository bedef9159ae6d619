/**
 * Rejection tallies: how many requests a gateway answered 429 because of one block, counted
 * by the probe and sent in batches of their own beside the event batches, on the same
 * partitions. A blocked request emits no event (that would cost as much as serving it), yet
 * the aggregator must see the load the block holds back, or the path looks quiet and the block
 * ends while the flood goes on: a tally carries the count for one (resource, path, block) over
 * one flush interval, so a flood of any size costs a few records per interval.
 *
 * A tally batch has the event batch's header (format 2: 12 bytes with the writer's layout;
 * format 1: 8 bytes) with its own kind, so a reader tells the two apart from the third byte; a
 * reader that knows only event batches rejects a tally batch as malformed (and counts it)
 * without misreading it.
 *
 * | offset | size | field                                               |
 * | ------ | ---- | --------------------------------------------------- |
 * | 0      | 2    | magic `0x53 0x4C` ("SL")                             |
 * | 2      | 1    | kind `0x52` ("R", rejection tallies)                 |
 * | 3      | 1    | format version (2)                                   |
 * | 4      | 4    | count of records (u32, at most 10,000)               |
 * | 8      | 2    | partitions the writer spreads batches over (1..1024) |
 * | 10     | 1    | partition layout version (1)                         |
 * | 11     | 1    | reserved (0)                                         |
 *
 * Each record, 32 bytes, big-endian (offset relative to the record):
 *
 * | offset | size | field                                                        |
 * | ------ | ---- | ------------------------------------------------------------ |
 * | 0      | 4    | resource hash (u32, never 0)                                  |
 * | 4      | 4    | path hash (u32, 0 = none)                                     |
 * | 8      | 4    | value: hash of the blocked value (u32, never 0)               |
 * | 12     | 1    | dimension of the block (1 resource, 2 path, 3 user, 4 ip, 5 tenant) |
 * | 13     | 3    | reserved (0)                                                  |
 * | 16     | 4    | rejected requests (u32, at least 1)                           |
 * | 20     | 8    | last rejection counted, epoch ms (u64, at most 2^53 - 1)      |
 * | 28     | 4    | span: ms from the first rejection counted to the last (u32)   |
 */
import { DIMENSIONS, type Dimension } from '../decisions/codec.js';
import { StreamError, StreamErrorCodes } from '../errors.js';
import { EVENT_HEADER_BYTES, batchHeaderBytes, readBatchHeader, writeBatchHeader, type BatchLayout } from './codec.js';

/** The requests one gateway rejected for one block, on one resource and path, over a short span. */
export interface RejectionTally {
  /** 32-bit hash of the resource of the rejected requests, never 0. */
  resource: number;
  /** 32-bit hash of their path, 0 = none. */
  path: number;
  /** The dimension the block is on. */
  dimension: Dimension;
  /** The blocked value's hash, never 0. */
  value: number;
  /** Requests rejected, at least 1. */
  count: number;
  /** When the last of them was rejected, epoch ms. */
  lastMs: number;
  /** Milliseconds from the first of them to the last. */
  spanMs: number;
}

/** Bytes of one tally record. */
export const TALLY_BYTES = 32;
/** Bytes of the batch header of format 2 (the same header as an event batch). */
export const TALLY_HEADER_BYTES = EVENT_HEADER_BYTES;
/** Most records one tally batch may carry. */
export const MAX_TALLIES_PER_BATCH = 10_000;
/** Most requests one record counts (u32). */
export const MAX_TALLY_COUNT = 0xffff_ffff;

/** What a batch on an event partition holds, from its third byte. */
export const BatchKind = Object.freeze({
  /** Gateway events (`decodeEvents`). */
  EVENTS: 0x45,
  /** Rejection tallies (`decodeTallies`). */
  TALLIES: 0x52,
} as const);

const MAGIC_0 = 0x53;
const MAGIC_1 = 0x4c;
const TWO_32 = 0x1_0000_0000;

/** The {@link BatchKind} of a batch, or 0 when it is not a Sluice batch at all. */
export function batchKind(batch: Uint8Array): number {
  if (!(batch instanceof Uint8Array) || batch.length < 3 || batch[0] !== MAGIC_0 || batch[1] !== MAGIC_1) return 0;
  return batch[2]!;
}

function isU32(v: number): boolean {
  return Number.isInteger(v) && v >= 0 && v < TWO_32;
}

function invalidTally(index: number, field: string, value: unknown): StreamError {
  return new StreamError(StreamErrorCodes.INVALID_RECORD, `tallies[${index}].${field}: out of range (${String(value)})`);
}

/** Throws {@link StreamError} `SLUICE_ERR_STREAM_INVALID_RECORD` when a tally cannot be encoded. */
export function validateTally(t: RejectionTally, index = 0): void {
  if (!isU32(t.resource) || t.resource === 0) throw invalidTally(index, 'resource', t.resource);
  if (!isU32(t.path)) throw invalidTally(index, 'path', t.path);
  if (!DIMENSIONS.includes(t.dimension)) throw invalidTally(index, 'dimension', t.dimension);
  if (!isU32(t.value) || t.value === 0) throw invalidTally(index, 'value', t.value);
  if (!isU32(t.count) || t.count === 0) throw invalidTally(index, 'count', t.count);
  if (!Number.isSafeInteger(t.lastMs) || t.lastMs < 0) throw invalidTally(index, 'lastMs', t.lastMs);
  if (!isU32(t.spanMs) || t.spanMs > t.lastMs) throw invalidTally(index, 'spanMs', t.spanMs);
}

/**
 * Writes the header of a tally batch of `count` records at the start of `view`: format 2
 * carrying `layout`, format 1 without. Records start at `batchHeaderBytes(layout)`.
 */
export function writeTalliesHeader(view: DataView, count: number, layout?: BatchLayout): void {
  if (!Number.isInteger(count) || count < 0 || count > MAX_TALLIES_PER_BATCH) {
    throw new StreamError(
      StreamErrorCodes.BATCH_TOO_LARGE,
      `a tally batch holds at most ${MAX_TALLIES_PER_BATCH} tallies (got ${count})`,
    );
  }
  writeBatchHeader(view, BatchKind.TALLIES, count, layout);
}

/** Writes one record at byte `offset` of `view` without validating it (see {@link encodeTallies}). */
export function writeTallyRecord(view: DataView, offset: number, t: RejectionTally): void {
  view.setUint32(offset, t.resource);
  view.setUint32(offset + 4, t.path);
  view.setUint32(offset + 8, t.value);
  view.setUint32(offset + 12, (DIMENSIONS.indexOf(t.dimension) + 1) << 24);
  view.setUint32(offset + 16, t.count);
  view.setUint32(offset + 20, Math.floor(t.lastMs / TWO_32));
  view.setUint32(offset + 24, t.lastMs >>> 0);
  view.setUint32(offset + 28, t.spanMs);
}

/**
 * Encodes one tally batch: format 2 carrying `layout` (what gateways write), format 1 without.
 * Throws {@link StreamError} `SLUICE_ERR_STREAM_BATCH_TOO_LARGE` above
 * {@link MAX_TALLIES_PER_BATCH} records and `SLUICE_ERR_STREAM_INVALID_RECORD` for a field out
 * of range.
 */
export function encodeTallies(tallies: readonly RejectionTally[], layout?: BatchLayout): Uint8Array {
  const header = batchHeaderBytes(layout);
  const bytes = new Uint8Array(header + Math.min(tallies.length, MAX_TALLIES_PER_BATCH + 1) * TALLY_BYTES);
  const view = new DataView(bytes.buffer);
  writeTalliesHeader(view, tallies.length, layout);
  for (let i = 0; i < tallies.length; i++) {
    validateTally(tallies[i]!, i);
    writeTallyRecord(view, header + i * TALLY_BYTES, tallies[i]!);
  }
  return bytes;
}

function malformed(message: string): StreamError {
  return new StreamError(StreamErrorCodes.MALFORMED, `tally batch: ${message}`);
}

/**
 * Decodes one tally batch, of format 1 or 2. Throws {@link StreamError}
 * `SLUICE_ERR_STREAM_MALFORMED` on foreign, truncated, oversized or out-of-range input; never
 * returns a partial batch.
 */
export function decodeTallies(batch: Uint8Array): RejectionTally[] {
  const { count, headerBytes } = readBatchHeader(batch, BatchKind.TALLIES, 'tally', TALLY_BYTES, MAX_TALLIES_PER_BATCH);
  const view = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  const out = new Array<RejectionTally>(count);
  for (let i = 0; i < count; i++) {
    const o = headerBytes + i * TALLY_BYTES;
    const resource = view.getUint32(o);
    const value = view.getUint32(o + 8);
    const dimension = DIMENSIONS[view.getUint8(o + 12) - 1];
    const n = view.getUint32(o + 16);
    const hi = view.getUint32(o + 20);
    const spanMs = view.getUint32(o + 28);
    if (resource === 0) throw malformed(`tally ${i}: resource hash 0`);
    if (value === 0) throw malformed(`tally ${i}: value hash 0`);
    if (dimension === undefined) throw malformed(`tally ${i}: dimension ${view.getUint8(o + 12)}`);
    if (view.getUint8(o + 13) !== 0 || view.getUint16(o + 14) !== 0) throw malformed(`tally ${i}: reserved bytes set`);
    if (n === 0) throw malformed(`tally ${i}: count 0`);
    if (hi > 0x1f_ffff) throw malformed(`tally ${i}: timestamp beyond 2^53`);
    const lastMs = hi * TWO_32 + view.getUint32(o + 24);
    if (spanMs > lastMs) throw malformed(`tally ${i}: span ${spanMs} before the epoch`);
    out[i] = { resource, path: view.getUint32(o + 4), dimension, value, count: n, lastMs, spanMs };
  }
  return out;
}
