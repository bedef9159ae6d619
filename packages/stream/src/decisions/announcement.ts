/**
 * Aggregator announcements: every aggregator broadcasts, on the decision channel beside its
 * decisions, who it is, how it splits the stream and which partitions it owns, every
 * `announceMs`. Other aggregators of its group read them to find a second owner of a partition
 * (two aggregators whose ownership stores do not see each other); gateways read them to find an
 * aggregator that splits the stream another way than they do. Binary, big-endian:
 *
 * | offset | size | field                                                              |
 * | ------ | ---- | ------------------------------------------------------------------ |
 * | 0      | 2    | magic `0x53 0x4C` ("SL")                                            |
 * | 2      | 1    | kind `0x41` ("A", announcement)                                     |
 * | 3      | 1    | format version (1)                                                  |
 * | 4      | 2    | partitions the aggregator reads (1..1024)                           |
 * | 6      | 1    | partition layout version (1..255, `LAYOUT_VERSION`)                 |
 * | 7      | 1    | ownership store: 0 other, 1 memory (one process), 2 Redis           |
 * | 8      | 8    | issuedAtMs, epoch ms (u64, at most 2^53 - 1)                        |
 * | 16     | 4    | announceMs: the next announcement is due within this (1..3,600,000) |
 * | 20     | 2    | id length in UTF-8 bytes (1..512)                                   |
 * | 22     | 1    | group length in bytes (1..64)                                       |
 * | 23     | 1    | reserved (0)                                                        |
 * | 24     | n    | aggregator id, UTF-8, at most 128 characters                        |
 * | 24+n   | g    | consumer group, UTF-8                                               |
 * | 24+n+g | b    | owned partitions, a bitmap of `ceil(partitions / 8)` bytes: bit `p & 7` (least significant first) of byte `p >> 3` |
 *
 * A gateway older than announcements counts each one as a malformed decision message and skips
 * it (`announceMs: 0` on the aggregators stops them).
 */
import { StreamError, StreamErrorCodes } from '../errors.js';

/** Where an aggregator keeps partition ownership, as far as its peers need to know. */
export type OwnershipKind = 'memory' | 'redis' | 'other';

/** What an aggregator says about itself to the others and to the gateways. */
export interface AggregatorAnnouncement {
  /** The aggregator's owner id, 1..128 characters. */
  id: string;
  /** Its consumer group. */
  group: string;
  /** Partitions its transport has (the partitions it splits the stream into), 1..1024. */
  partitions: number;
  /** The partition layout version it expects (`LAYOUT_VERSION`). */
  layoutVersion: number;
  /** Its ownership store: `memory` is private to one process, so it sees no other process. */
  ownership: OwnershipKind;
  /** When it was sent, epoch ms. */
  issuedAtMs: number;
  /** The next announcement of this aggregator is due within this many ms. */
  announceMs: number;
  /** Partitions it owns now, ascending. */
  owned: number[];
}

/** The kind byte of an announcement (third byte, as `batchKind` reads it). */
export const ANNOUNCEMENT_KIND = 0x41;
/** Longest announcement interval an announcement may state (1 hour). */
export const MAX_ANNOUNCE_MS = 3_600_000;

const HEADER_BYTES = 24;
const MAGIC_0 = 0x53;
const MAGIC_1 = 0x4c;
const VERSION = 1;
const TWO_32 = 0x1_0000_0000;
const MAX_PARTITIONS = 1024;
const MAX_ID_LENGTH = 128;
const MAX_ID_BYTES = MAX_ID_LENGTH * 4;
const MAX_GROUP_BYTES = 64;
const OWNERSHIP_CODES: readonly OwnershipKind[] = ['other', 'memory', 'redis'];

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function invalid(field: string, value: unknown): StreamError {
  return new StreamError(StreamErrorCodes.INVALID_RECORD, `announcement.${field}: out of range (${String(value)})`);
}

function malformed(message: string, cause?: unknown): StreamError {
  return new StreamError(StreamErrorCodes.MALFORMED, `announcement: ${message}`, cause === undefined ? undefined : { cause });
}

/**
 * Encodes one announcement. Throws {@link StreamError} `SLUICE_ERR_STREAM_INVALID_RECORD` for a
 * field out of range.
 */
export function encodeAnnouncement(a: AggregatorAnnouncement): Uint8Array {
  if (!Number.isInteger(a.partitions) || a.partitions < 1 || a.partitions > MAX_PARTITIONS)
    throw invalid('partitions', a.partitions);
  if (!Number.isInteger(a.layoutVersion) || a.layoutVersion < 1 || a.layoutVersion > 255) {
    throw invalid('layoutVersion', a.layoutVersion);
  }
  const kind = OWNERSHIP_CODES.indexOf(a.ownership);
  if (kind < 0) throw invalid('ownership', a.ownership);
  if (!Number.isSafeInteger(a.issuedAtMs) || a.issuedAtMs < 0) throw invalid('issuedAtMs', a.issuedAtMs);
  if (!Number.isInteger(a.announceMs) || a.announceMs < 1 || a.announceMs > MAX_ANNOUNCE_MS)
    throw invalid('announceMs', a.announceMs);
  if (typeof a.id !== 'string' || a.id.length < 1 || a.id.length > MAX_ID_LENGTH) throw invalid('id', a.id);
  const id = encoder.encode(a.id);
  const group = encoder.encode(typeof a.group === 'string' ? a.group : '');
  if (group.length < 1 || group.length > MAX_GROUP_BYTES) throw invalid('group', a.group);
  const bitmap = new Uint8Array(Math.ceil(a.partitions / 8));
  for (const p of a.owned) {
    if (!Number.isInteger(p) || p < 0 || p >= a.partitions) throw invalid('owned', p);
    bitmap[p >> 3]! |= 1 << (p & 7);
  }
  const bytes = new Uint8Array(HEADER_BYTES + id.length + group.length + bitmap.length);
  const view = new DataView(bytes.buffer);
  view.setUint8(0, MAGIC_0);
  view.setUint8(1, MAGIC_1);
  view.setUint8(2, ANNOUNCEMENT_KIND);
  view.setUint8(3, VERSION);
  view.setUint16(4, a.partitions);
  view.setUint8(6, a.layoutVersion);
  view.setUint8(7, kind);
  view.setUint32(8, Math.floor(a.issuedAtMs / TWO_32));
  view.setUint32(12, a.issuedAtMs >>> 0);
  view.setUint32(16, a.announceMs);
  view.setUint16(20, id.length);
  view.setUint8(22, group.length);
  view.setUint8(23, 0);
  bytes.set(id, HEADER_BYTES);
  bytes.set(group, HEADER_BYTES + id.length);
  bytes.set(bitmap, HEADER_BYTES + id.length + group.length);
  return bytes;
}

function text(bytes: Uint8Array, field: string): string {
  try {
    return decoder.decode(bytes);
  } catch (err) {
    throw malformed(`${field} is not UTF-8`, err);
  }
}

/**
 * Decodes one announcement. Throws {@link StreamError} `SLUICE_ERR_STREAM_MALFORMED` on foreign,
 * truncated, padded or out-of-range input.
 */
export function decodeAnnouncement(bytes: Uint8Array): AggregatorAnnouncement {
  if (!(bytes instanceof Uint8Array)) throw malformed('not bytes');
  if (bytes.length < HEADER_BYTES) throw malformed(`truncated header (${bytes.length} bytes)`);
  if (bytes[0] !== MAGIC_0 || bytes[1] !== MAGIC_1 || bytes[2] !== ANNOUNCEMENT_KIND)
    throw malformed('not an announcement (bad magic)');
  if (bytes[3] !== VERSION) throw malformed(`unsupported version ${bytes[3]}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const partitions = view.getUint16(4);
  const layoutVersion = view.getUint8(6);
  const ownership = OWNERSHIP_CODES[view.getUint8(7)];
  const hi = view.getUint32(8);
  const announceMs = view.getUint32(16);
  const idBytes = view.getUint16(20);
  const groupBytes = view.getUint8(22);
  if (partitions < 1 || partitions > MAX_PARTITIONS) throw malformed(`${partitions} partitions`);
  if (layoutVersion === 0) throw malformed('layout version 0');
  if (ownership === undefined) throw malformed(`ownership store ${view.getUint8(7)}`);
  if (hi > 0x1f_ffff) throw malformed('issuedAtMs beyond 2^53');
  if (announceMs < 1 || announceMs > MAX_ANNOUNCE_MS) throw malformed(`announceMs ${announceMs}`);
  if (idBytes < 1 || idBytes > MAX_ID_BYTES) throw malformed(`id of ${idBytes} bytes`);
  if (groupBytes < 1 || groupBytes > MAX_GROUP_BYTES) throw malformed(`group of ${groupBytes} bytes`);
  if (view.getUint8(23) !== 0) throw malformed('reserved byte set');
  const bitmapBytes = Math.ceil(partitions / 8);
  const expected = HEADER_BYTES + idBytes + groupBytes + bitmapBytes;
  if (bytes.length !== expected) throw malformed(`length ${bytes.length}, expected ${expected}`);
  const id = text(bytes.subarray(HEADER_BYTES, HEADER_BYTES + idBytes), 'id');
  if (id.length > MAX_ID_LENGTH) throw malformed(`id longer than ${MAX_ID_LENGTH} characters`);
  const group = text(bytes.subarray(HEADER_BYTES + idBytes, HEADER_BYTES + idBytes + groupBytes), 'group');
  const owned: number[] = [];
  const base = HEADER_BYTES + idBytes + groupBytes;
  for (let i = 0; i < bitmapBytes; i++) {
    const b = bytes[base + i]!;
    if (b === 0) continue;
    for (let bit = 0; bit < 8; bit++) {
      if ((b & (1 << bit)) === 0) continue;
      const p = i * 8 + bit;
      if (p >= partitions) throw malformed(`partition ${p} owned of ${partitions}`);
      owned.push(p);
    }
  }
  return {
    id,
    group,
    partitions,
    layoutVersion,
    ownership,
    issuedAtMs: hi * TWO_32 + view.getUint32(12),
    announceMs,
    owned,
  };
}
