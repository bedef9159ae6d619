/**
 * The gateway event: one request that passed the gateway, as a fixed 32-byte binary record.
 * Events travel in batches: a 12-byte header followed by `count` records, all big-endian.
 *
 * | offset | size | field                                               |
 * | ------ | ---- | --------------------------------------------------- |
 * | 0      | 2    | magic `0x53 0x4C` ("SL")                             |
 * | 2      | 1    | kind `0x45` ("E", events)                            |
 * | 3      | 1    | format version (2)                                   |
 * | 4      | 4    | count of records (u32, at most 10,000)               |
 * | 8      | 2    | partitions the writer spreads events over (1..1024)  |
 * | 10     | 1    | partition layout version (1, see `partitionOf`)      |
 * | 11     | 1    | reserved (0)                                         |
 *
 * Format 1 (what 0.1 wrote, still read) has the first 8 bytes only: no layout. The layout lets
 * a reader tell that a batch was put on its partition by a writer that splits the stream
 * differently (another partition count), which no record would show.
 *
 * Each record (offset relative to the record):
 *
 * | offset | size | field                                               |
 * | ------ | ---- | --------------------------------------------------- |
 * | 0      | 4    | resource hash (u32, never 0)                         |
 * | 4      | 4    | path hash (u32, 0 = none)                            |
 * | 8      | 4    | user hash (u32, 0 = none)                            |
 * | 12     | 4    | ip hash (u32, 0 = none)                              |
 * | 16     | 4    | tenant hash (u32, 0 = none)                          |
 * | 20     | 8    | timestamp, epoch ms (u64, at most 2^53 - 1)          |
 * | 28     | 2    | HTTP status (u16, 0..999, 0 = unknown)               |
 * | 30     | 1    | outcome (0 passed, 1 error)                          |
 * | 31     | 1    | flags, reserved (0)                                  |
 *
 * Fixed-size records keep the probe allocation-free (it writes straight into its buffer) and let
 * a reader validate a batch from its length alone.
 */
import { StreamError, StreamErrorCodes } from '../errors.js';

/** What happened to a request that passed the gateway. */
export const EventOutcome = Object.freeze({
  /** Answered without a server error. */
  PASSED: 0,
  /** Answered 5xx, or the connection was aborted before the answer finished. */
  ERROR: 1,
} as const);

/** An {@link EventOutcome} value. */
export type EventOutcomeValue = (typeof EventOutcome)[keyof typeof EventOutcome];

/** One request seen by a gateway. Dimensions are 32-bit hashes ({@link hashValue}). */
export interface GatewayEvent {
  /** 32-bit hash of the resource (API / route group), never 0. */
  resource: number;
  /** 32-bit hash of the request path (route template), 0 = none. */
  path: number;
  /** 32-bit hash of the user, 0 = none. */
  user: number;
  /** 32-bit hash of the client IP, 0 = none. */
  ip: number;
  /** 32-bit hash of the tenant, 0 = none. */
  tenant: number;
  /** When the request was answered, epoch ms. */
  timestampMs: number;
  /** HTTP status of the answer (0 if unknown). */
  status: number;
  /** {@link EventOutcome}: 0 passed, 1 error (5xx / aborted). */
  outcome: number;
}

/** Bytes of one event record. */
export const EVENT_BYTES = 32;
/** Bytes of the batch header of the current format (2), which carries the {@link BatchLayout}. */
export const EVENT_HEADER_BYTES = 12;
/** Bytes of the batch header of format 1 (no layout). */
export const EVENT_HEADER_BYTES_V1 = 8;
/** The batch format a writer uses: 2 carries the layout, 1 is what 0.1 readers know. */
export type BatchFormat = 1 | 2;

/**
 * How a writer maps events to partitions: its partition count and the version of the mapping
 * ({@link LAYOUT_VERSION}). A reader whose own layout differs reads events that were meant for
 * a stream split another way.
 */
export interface BatchLayout {
  /** Partitions the writer spreads events over, 1..1024. */
  readonly partitions: number;
  /** The partition mapping's version, 1..255 ({@link LAYOUT_VERSION} today). */
  readonly version: number;
}

/**
 * The version of the partition mapping (`partitionOf`): 1 is
 * `(FNV-1a-32(resource) mod partitions + saltSlot) mod partitions`. It changes whenever where an
 * event goes changes (another hash, another formula).
 */
export const LAYOUT_VERSION = 1;
/** Most records one batch may carry; larger batches are refused on both sides. */
export const MAX_EVENTS_PER_BATCH = 10_000;

const MAGIC_0 = 0x53;
const MAGIC_1 = 0x4c;
const KIND_EVENTS = 0x45;
const MAX_LAYOUT_PARTITIONS = 1024;
const TWO_32 = 0x1_0000_0000;
const MAX_STATUS = 999;

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/**
 * FNV-1a (32-bit) of the UTF-8 bytes of `value`. Returns 0 only for the empty string (0 means
 * "none" in an event); a non-empty value that happens to hash to 0 maps to 1. Works on the
 * string's code units directly so hashing never allocates.
 */
export function hashValue(value: string): number {
  return hashRange(value, 0, value.length);
}

/**
 * {@link hashValue} of `value.slice(start, end)` without making the slice (the gateway hashes
 * the path and its first segment in place). `start` and `end` are clamped to the string.
 */
export function hashRange(value: string, start: number, end: number): number {
  const n = Math.min(end, value.length);
  let i = Math.max(0, start);
  if (i >= n) return 0;
  let h = FNV_OFFSET | 0;
  // ASCII is the common case (paths, ids, addresses): one multiply per character.
  for (; i < n; i++) {
    const c = value.charCodeAt(i);
    if (c >= 0x80) break;
    h = Math.imul(h ^ c, FNV_PRIME);
  }
  if (i < n) h = hashNonAscii(value, i, n, h);
  h >>>= 0;
  return h === 0 ? 1 : h;
}

/** Continues an FNV-1a hash over UTF-8 bytes of `value[i..n)`, which holds non-ASCII text. */
function hashNonAscii(value: string, i: number, n: number, h: number): number {
  for (; i < n; i++) {
    let c = value.charCodeAt(i);
    if (c < 0x80) {
      h = Math.imul(h ^ c, FNV_PRIME);
      continue;
    }
    if (c < 0x800) {
      h = Math.imul(h ^ (0xc0 | (c >> 6)), FNV_PRIME);
      h = Math.imul(h ^ (0x80 | (c & 0x3f)), FNV_PRIME);
      continue;
    }
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < n) {
      const low = value.charCodeAt(i + 1);
      if (low >= 0xdc00 && low <= 0xdfff) {
        i++;
        c = 0x10000 + ((c - 0xd800) << 10) + (low - 0xdc00);
        h = Math.imul(h ^ (0xf0 | (c >> 18)), FNV_PRIME);
        h = Math.imul(h ^ (0x80 | ((c >> 12) & 0x3f)), FNV_PRIME);
        h = Math.imul(h ^ (0x80 | ((c >> 6) & 0x3f)), FNV_PRIME);
        h = Math.imul(h ^ (0x80 | (c & 0x3f)), FNV_PRIME);
        continue;
      }
    }
    // A lone surrogate is hashed as U+FFFD, as TextEncoder would encode it.
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
    h = Math.imul(h ^ (0xe0 | (c >> 12)), FNV_PRIME);
    h = Math.imul(h ^ (0x80 | ((c >> 6) & 0x3f)), FNV_PRIME);
    h = Math.imul(h ^ (0x80 | (c & 0x3f)), FNV_PRIME);
  }
  return h;
}

function isU32(v: number): boolean {
  return Number.isInteger(v) && v >= 0 && v < TWO_32;
}

function invalidEvent(index: number, field: string, value: unknown): StreamError {
  return new StreamError(StreamErrorCodes.INVALID_RECORD, `events[${index}].${field}: out of range (${String(value)})`);
}

/** Throws {@link StreamError} `SLUICE_ERR_STREAM_INVALID_RECORD` when an event cannot be encoded. */
export function validateEvent(e: GatewayEvent, index = 0): void {
  if (!isU32(e.resource) || e.resource === 0) throw invalidEvent(index, 'resource', e.resource);
  if (!isU32(e.path)) throw invalidEvent(index, 'path', e.path);
  if (!isU32(e.user)) throw invalidEvent(index, 'user', e.user);
  if (!isU32(e.ip)) throw invalidEvent(index, 'ip', e.ip);
  if (!isU32(e.tenant)) throw invalidEvent(index, 'tenant', e.tenant);
  if (!Number.isSafeInteger(e.timestampMs) || e.timestampMs < 0) throw invalidEvent(index, 'timestampMs', e.timestampMs);
  if (!Number.isInteger(e.status) || e.status < 0 || e.status > MAX_STATUS) throw invalidEvent(index, 'status', e.status);
  if (e.outcome !== EventOutcome.PASSED && e.outcome !== EventOutcome.ERROR) throw invalidEvent(index, 'outcome', e.outcome);
}

/** Throws `SLUICE_ERR_STREAM_BATCH_TOO_LARGE` unless `count` fits in one batch. */
function checkBatchSize(count: number): void {
  if (!Number.isInteger(count) || count < 0 || count > MAX_EVENTS_PER_BATCH) {
    throw new StreamError(
      StreamErrorCodes.BATCH_TOO_LARGE,
      `an event batch holds at most ${MAX_EVENTS_PER_BATCH} events (got ${count})`,
    );
  }
}

/** Bytes of the header of a batch written with `layout` (format 2 with one, 1 without). */
export function batchHeaderBytes(layout: BatchLayout | undefined): number {
  return layout === undefined ? EVENT_HEADER_BYTES_V1 : EVENT_HEADER_BYTES;
}

/** Throws `SLUICE_ERR_STREAM_INVALID_RECORD` unless `layout` can be written in a header. */
export function checkLayout(layout: BatchLayout): BatchLayout {
  const { partitions, version } = layout;
  if (!Number.isInteger(partitions) || partitions < 1 || partitions > MAX_LAYOUT_PARTITIONS) {
    throw new StreamError(StreamErrorCodes.INVALID_RECORD, `layout.partitions: out of range (${String(partitions)})`);
  }
  if (!Number.isInteger(version) || version < 1 || version > 255) {
    throw new StreamError(StreamErrorCodes.INVALID_RECORD, `layout.version: out of range (${String(version)})`);
  }
  return layout;
}

/**
 * Writes a batch header of `kind` at the start of `view`: format 2 with `layout`, format 1
 * without. `count` has been checked by the caller.
 */
export function writeBatchHeader(view: DataView, kind: number, count: number, layout: BatchLayout | undefined): void {
  view.setUint8(0, MAGIC_0);
  view.setUint8(1, MAGIC_1);
  view.setUint8(2, kind);
  view.setUint8(3, layout === undefined ? 1 : 2);
  view.setUint32(4, count);
  if (layout !== undefined) {
    checkLayout(layout);
    view.setUint16(8, layout.partitions);
    view.setUint8(10, layout.version);
    view.setUint8(11, 0);
  }
}

/**
 * Reads the header of a batch of `kind` (`what` names it in errors): its record count and
 * layout, after checking magic, version, bounds and that the length is exactly the header plus
 * `count * recordBytes`. Throws `SLUICE_ERR_STREAM_MALFORMED`.
 */
export function readBatchHeader(
  batch: Uint8Array,
  kind: number,
  what: string,
  recordBytes: number,
  maxCount: number,
): { count: number; headerBytes: number; layout: BatchLayout | undefined } {
  const bad = (message: string) => new StreamError(StreamErrorCodes.MALFORMED, `${what} batch: ${message}`);
  if (!(batch instanceof Uint8Array)) throw bad('not bytes');
  if (batch.length < EVENT_HEADER_BYTES_V1) throw bad(`truncated header (${batch.length} bytes)`);
  if (batch[0] !== MAGIC_0 || batch[1] !== MAGIC_1 || batch[2] !== kind) throw bad('not this kind of batch (bad magic)');
  const format = batch[3];
  if (format !== 1 && format !== 2) throw bad(`unsupported version ${format}`);
  const view = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  let layout: BatchLayout | undefined;
  let headerBytes = EVENT_HEADER_BYTES_V1;
  if (format === 2) {
    headerBytes = EVENT_HEADER_BYTES;
    if (batch.length < headerBytes) throw bad(`truncated header (${batch.length} bytes)`);
    const partitions = view.getUint16(8);
    const version = view.getUint8(10);
    if (partitions < 1 || partitions > MAX_LAYOUT_PARTITIONS) throw bad(`layout of ${partitions} partitions`);
    if (version === 0) throw bad('layout version 0');
    if (view.getUint8(11) !== 0) throw bad('reserved header byte set');
    layout = { partitions, version };
  }
  const count = view.getUint32(4);
  if (count > maxCount) throw bad(`${count} records exceed the bound of ${maxCount}`);
  const expected = headerBytes + count * recordBytes;
  if (batch.length !== expected) throw bad(`length ${batch.length} does not match ${count} records (${expected} bytes)`);
  return { count, headerBytes, layout };
}

/**
 * Writes the batch header for `count` records at the start of `view`: format 2 carrying
 * `layout`, or format 1 (8 bytes, for readers older than the layout) without one. Records start
 * at {@link batchHeaderBytes}`(layout)`.
 */
export function writeEventsHeader(view: DataView, count: number, layout?: BatchLayout): void {
  checkBatchSize(count);
  writeBatchHeader(view, KIND_EVENTS, count, layout);
}

/**
 * The layout a batch (of events or tallies) was written with, from its header; `undefined` for
 * a format 1 batch or bytes too short to say. It does not validate the batch (decode it for that).
 */
export function batchLayout(batch: Uint8Array): BatchLayout | undefined {
  if (!(batch instanceof Uint8Array) || batch.length < EVENT_HEADER_BYTES || batch[0] !== MAGIC_0 || batch[1] !== MAGIC_1) {
    return undefined;
  }
  if (batch[3] !== 2) return undefined;
  const view = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  return { partitions: view.getUint16(8), version: view.getUint8(10) };
}

/**
 * Writes one record at byte `offset` of `view` without validating it (the caller has: the
 * probe builds events from bounded values). Use {@link encodeEvents} for untrusted input.
 */
export function writeEventRecord(
  view: DataView,
  offset: number,
  resource: number,
  path: number,
  user: number,
  ip: number,
  tenant: number,
  timestampMs: number,
  status: number,
  outcome: number,
): void {
  view.setUint32(offset, resource);
  view.setUint32(offset + 4, path);
  view.setUint32(offset + 8, user);
  view.setUint32(offset + 12, ip);
  view.setUint32(offset + 16, tenant);
  view.setUint32(offset + 20, Math.floor(timestampMs / TWO_32));
  view.setUint32(offset + 24, timestampMs >>> 0);
  view.setUint16(offset + 28, status);
  view.setUint8(offset + 30, outcome);
  view.setUint8(offset + 31, 0);
}

/**
 * Encodes one batch: format 2 carrying `layout` (what gateways write), or format 1 without one.
 * Throws {@link StreamError} `SLUICE_ERR_STREAM_BATCH_TOO_LARGE` above
 * {@link MAX_EVENTS_PER_BATCH} events and `SLUICE_ERR_STREAM_INVALID_RECORD` for a field out of
 * range.
 */
export function encodeEvents(events: readonly GatewayEvent[], layout?: BatchLayout): Uint8Array {
  const count = events.length;
  // Checked before the buffer is sized, not only when the header is written.
  checkBatchSize(count);
  const header = batchHeaderBytes(layout);
  const bytes = new Uint8Array(header + count * EVENT_BYTES);
  const view = new DataView(bytes.buffer);
  writeEventsHeader(view, count, layout);
  for (let i = 0; i < count; i++) {
    const e = events[i]!;
    validateEvent(e, i);
    writeEventRecord(
      view,
      header + i * EVENT_BYTES,
      e.resource,
      e.path,
      e.user,
      e.ip,
      e.tenant,
      e.timestampMs,
      e.status,
      e.outcome,
    );
  }
  return bytes;
}

function malformed(message: string): StreamError {
  return new StreamError(StreamErrorCodes.MALFORMED, `event batch: ${message}`);
}

/** Reads the record count of a batch after checking its header and length; throws like {@link decodeEvents}. */
export function eventCount(batch: Uint8Array): number {
  return readBatchHeader(batch, KIND_EVENTS, 'event', EVENT_BYTES, MAX_EVENTS_PER_BATCH).count;
}

/**
 * Decodes one batch, of format 1 or 2 (its layout: {@link batchLayout}). Throws
 * {@link StreamError} `SLUICE_ERR_STREAM_MALFORMED` on foreign, truncated, oversized or
 * out-of-range input; never returns a partial batch.
 */
export function decodeEvents(batch: Uint8Array): GatewayEvent[] {
  const { count, headerBytes } = readBatchHeader(batch, KIND_EVENTS, 'event', EVENT_BYTES, MAX_EVENTS_PER_BATCH);
  const view = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  const out = new Array<GatewayEvent>(count);
  for (let i = 0; i < count; i++) {
    const o = headerBytes + i * EVENT_BYTES;
    const resource = view.getUint32(o);
    const hi = view.getUint32(o + 20);
    const status = view.getUint16(o + 28);
    const outcome = view.getUint8(o + 30);
    if (resource === 0) throw malformed(`event ${i}: resource hash 0`);
    if (hi > 0x1f_ffff) throw malformed(`event ${i}: timestamp beyond 2^53`);
    if (status > MAX_STATUS) throw malformed(`event ${i}: status ${status}`);
    if (outcome > EventOutcome.ERROR) throw malformed(`event ${i}: outcome ${outcome}`);
    if (view.getUint8(o + 31) !== 0) throw malformed(`event ${i}: reserved flags set`);
    out[i] = {
      resource,
      path: view.getUint32(o + 4),
      user: view.getUint32(o + 8),
      ip: view.getUint32(o + 12),
      tenant: view.getUint32(o + 16),
      timestampMs: hi * TWO_32 + view.getUint32(o + 24),
      status,
      outcome,
    };
  }
  return out;
}
