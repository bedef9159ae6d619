/**
 * Governance decisions broadcast from aggregators to every gateway: block a dimension value
 * for a TTL (refreshed while the condition holds) or lift it. Binary, big-endian; a message
 * carries one or more decisions after an 8-byte header.
 *
 * | offset | size | field                                                  |
 * | ------ | ---- | ------------------------------------------------------ |
 * | 0      | 2    | magic `0x53 0x4C` ("SL")                                |
 * | 2      | 1    | kind `0x44` ("D", decisions)                            |
 * | 3      | 1    | format version (1)                                      |
 * | 4      | 4    | count of decisions (u32, at most 4,096)                 |
 *
 * Each decision (24 bytes + rule id):
 *
 * | offset | size | field                                                  |
 * | ------ | ---- | ------------------------------------------------------ |
 * | 0      | 1    | action (1 block, 2 lift)                                |
 * | 1      | 1    | dimension (1 resource, 2 path, 3 user, 4 ip, 5 tenant)  |
 * | 2      | 1    | rule id length in UTF-8 bytes (0..192)                  |
 * | 3      | 1    | reserved (0)                                            |
 * | 4      | 4    | value: hash of the blocked value (u32, never 0)         |
 * | 8      | 4    | ttlMs (u32, 1..3,600,000 for a block)                   |
 * | 12     | 4    | retryAfterMs (u32, 0..3,600,000)                        |
 * | 16     | 8    | issuedAtMs, epoch ms (u64, at most 2^53 - 1)            |
 * | 24     | n    | rule id, UTF-8, at most 64 characters                   |
 */
import { StreamError, StreamErrorCodes } from '../errors.js';

/** A dimension of a request that a decision can block. */
export type Dimension = 'resource' | 'path' | 'user' | 'ip' | 'tenant';

/** Every dimension, in wire order (index + 1 is the wire code). */
export const DIMENSIONS: readonly Dimension[] = Object.freeze(['resource', 'path', 'user', 'ip', 'tenant'] as const);

/** A block or a lift of one dimension value. */
export interface GovernanceDecision {
  /** `block` starts or refreshes a block; `lift` ends it. */
  action: 'block' | 'lift';
  /** Which request dimension `value` is a hash of. */
  dimension: Dimension;
  /** The hash of the blocked value (see `hashValue`), never 0. */
  value: number;
  /** A block lapses after this unless refreshed (default 3000). Ignored for a lift. */
  ttlMs: number;
  /** What 429 answers advertise in `Retry-After`. */
  retryAfterMs: number;
  /** The rule that decided, at most 64 characters. */
  ruleId: string;
  /** When the aggregator decided, epoch ms. */
  issuedAtMs: number;
}

/** The TTL aggregators use when a rule does not say otherwise. */
export const DEFAULT_DECISION_TTL_MS = 3000;
/** Longest TTL or retry-after a decision may carry (1 hour): a block is never near-permanent. */
export const MAX_DECISION_TTL_MS = 3_600_000;
/** Most decisions one message may carry. */
export const MAX_DECISIONS_PER_MESSAGE = 4096;
/** Longest rule id, in characters. */
export const MAX_RULE_ID_LENGTH = 64;

const HEADER_BYTES = 8;
const RECORD_BYTES = 24;
const MAX_RULE_ID_BYTES = MAX_RULE_ID_LENGTH * 3;
const MAGIC_0 = 0x53;
const MAGIC_1 = 0x4c;
const KIND_DECISIONS = 0x44;
const VERSION = 1;
const TWO_32 = 0x1_0000_0000;
const ACTION_BLOCK = 1;
const ACTION_LIFT = 2;

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function invalid(index: number, field: string, value: unknown): StreamError {
  return new StreamError(StreamErrorCodes.INVALID_RECORD, `decisions[${index}].${field}: out of range (${String(value)})`);
}

function isU32(v: number): boolean {
  return Number.isInteger(v) && v >= 0 && v < TWO_32;
}

/**
 * Encodes decisions into one message. Throws {@link StreamError}
 * `SLUICE_ERR_STREAM_BATCH_TOO_LARGE` above {@link MAX_DECISIONS_PER_MESSAGE} decisions and
 * `SLUICE_ERR_STREAM_INVALID_RECORD` for a field out of range.
 */
export function encodeDecisions(ds: readonly GovernanceDecision[]): Uint8Array {
  if (ds.length > MAX_DECISIONS_PER_MESSAGE) {
    throw new StreamError(
      StreamErrorCodes.BATCH_TOO_LARGE,
      `a decision message holds at most ${MAX_DECISIONS_PER_MESSAGE} decisions (got ${ds.length})`,
    );
  }
  const ids: Uint8Array[] = [];
  let size = HEADER_BYTES;
  for (let i = 0; i < ds.length; i++) {
    const d = ds[i]!;
    if (d.action !== 'block' && d.action !== 'lift') throw invalid(i, 'action', d.action);
    if (!DIMENSIONS.includes(d.dimension)) throw invalid(i, 'dimension', d.dimension);
    if (!isU32(d.value) || d.value === 0) throw invalid(i, 'value', d.value);
    const minTtl = d.action === 'block' ? 1 : 0;
    if (!Number.isInteger(d.ttlMs) || d.ttlMs < minTtl || d.ttlMs > MAX_DECISION_TTL_MS) throw invalid(i, 'ttlMs', d.ttlMs);
    if (!Number.isInteger(d.retryAfterMs) || d.retryAfterMs < 0 || d.retryAfterMs > MAX_DECISION_TTL_MS) {
      throw invalid(i, 'retryAfterMs', d.retryAfterMs);
    }
    if (typeof d.ruleId !== 'string' || d.ruleId.length > MAX_RULE_ID_LENGTH) throw invalid(i, 'ruleId', d.ruleId);
    if (!Number.isSafeInteger(d.issuedAtMs) || d.issuedAtMs < 0) throw invalid(i, 'issuedAtMs', d.issuedAtMs);
    const id = encoder.encode(d.ruleId);
    ids.push(id);
    size += RECORD_BYTES + id.length;
  }
  const bytes = new Uint8Array(size);
  const view = new DataView(bytes.buffer);
  view.setUint8(0, MAGIC_0);
  view.setUint8(1, MAGIC_1);
  view.setUint8(2, KIND_DECISIONS);
  view.setUint8(3, VERSION);
  view.setUint32(4, ds.length);
  let o = HEADER_BYTES;
  for (let i = 0; i < ds.length; i++) {
    const d = ds[i]!;
    const id = ids[i]!;
    view.setUint8(o, d.action === 'block' ? ACTION_BLOCK : ACTION_LIFT);
    view.setUint8(o + 1, DIMENSIONS.indexOf(d.dimension) + 1);
    view.setUint8(o + 2, id.length);
    view.setUint8(o + 3, 0);
    view.setUint32(o + 4, d.value);
    view.setUint32(o + 8, d.ttlMs);
    view.setUint32(o + 12, d.retryAfterMs);
    view.setUint32(o + 16, Math.floor(d.issuedAtMs / TWO_32));
    view.setUint32(o + 20, d.issuedAtMs >>> 0);
    bytes.set(id, o + RECORD_BYTES);
    o += RECORD_BYTES + id.length;
  }
  return bytes;
}

function malformed(message: string, cause?: unknown): StreamError {
  return new StreamError(StreamErrorCodes.MALFORMED, `decision message: ${message}`, cause === undefined ? undefined : { cause });
}

/**
 * Decodes one message. Throws {@link StreamError} `SLUICE_ERR_STREAM_MALFORMED` on foreign,
 * truncated, oversized or out-of-range input; never returns a partial message.
 */
export function decodeDecisions(bytes: Uint8Array): GovernanceDecision[] {
  if (!(bytes instanceof Uint8Array)) throw malformed('not bytes');
  if (bytes.length < HEADER_BYTES) throw malformed(`truncated header (${bytes.length} bytes)`);
  if (bytes[0] !== MAGIC_0 || bytes[1] !== MAGIC_1 || bytes[2] !== KIND_DECISIONS)
    throw malformed('not a decision message (bad magic)');
  if (bytes[3] !== VERSION) throw malformed(`unsupported version ${bytes[3]}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const count = view.getUint32(4);
  if (count > MAX_DECISIONS_PER_MESSAGE) throw malformed(`${count} decisions exceed the bound of ${MAX_DECISIONS_PER_MESSAGE}`);
  if (bytes.length < HEADER_BYTES + count * RECORD_BYTES)
    throw malformed(`truncated: ${bytes.length} bytes for ${count} decisions`);
  const out = new Array<GovernanceDecision>(count);
  let o = HEADER_BYTES;
  for (let i = 0; i < count; i++) {
    if (o + RECORD_BYTES > bytes.length) throw malformed(`decision ${i}: truncated`);
    const action = view.getUint8(o);
    const dim = view.getUint8(o + 1);
    const idLength = view.getUint8(o + 2);
    const value = view.getUint32(o + 4);
    const ttlMs = view.getUint32(o + 8);
    const retryAfterMs = view.getUint32(o + 12);
    const hi = view.getUint32(o + 16);
    if (action !== ACTION_BLOCK && action !== ACTION_LIFT) throw malformed(`decision ${i}: action ${action}`);
    if (dim < 1 || dim > DIMENSIONS.length) throw malformed(`decision ${i}: dimension ${dim}`);
    if (view.getUint8(o + 3) !== 0) throw malformed(`decision ${i}: reserved byte set`);
    if (value === 0) throw malformed(`decision ${i}: value hash 0`);
    if (ttlMs > MAX_DECISION_TTL_MS || (action === ACTION_BLOCK && ttlMs === 0)) throw malformed(`decision ${i}: ttlMs ${ttlMs}`);
    if (retryAfterMs > MAX_DECISION_TTL_MS) throw malformed(`decision ${i}: retryAfterMs ${retryAfterMs}`);
    if (hi > 0x1f_ffff) throw malformed(`decision ${i}: issuedAtMs beyond 2^53`);
    if (idLength > MAX_RULE_ID_BYTES) throw malformed(`decision ${i}: rule id of ${idLength} bytes`);
    if (o + RECORD_BYTES + idLength > bytes.length) throw malformed(`decision ${i}: truncated rule id`);
    let ruleId: string;
    try {
      ruleId = decoder.decode(bytes.subarray(o + RECORD_BYTES, o + RECORD_BYTES + idLength));
    } catch (err) {
      throw malformed(`decision ${i}: rule id is not UTF-8`, err);
    }
    if (ruleId.length > MAX_RULE_ID_LENGTH)
      throw malformed(`decision ${i}: rule id longer than ${MAX_RULE_ID_LENGTH} characters`);
    out[i] = {
      action: action === ACTION_BLOCK ? 'block' : 'lift',
      dimension: DIMENSIONS[dim - 1]!,
      value,
      ttlMs,
      retryAfterMs,
      ruleId,
      issuedAtMs: hi * TWO_32 + view.getUint32(o + 20),
    };
    o += RECORD_BYTES + idLength;
  }
  if (o !== bytes.length) throw malformed(`${bytes.length - o} trailing bytes`);
  return out;
}
