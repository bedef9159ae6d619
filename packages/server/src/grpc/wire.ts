import { DELIMITED, Reader, VARINT, Writer } from './protobuf.js';

/**
 * Envoy's `RateLimitRequest` and `RateLimitResponse` in protobuf's encoding, read and written
 * with ./protobuf.ts. The gRPC port reads requests straight into a typed
 * {@link RateLimitRequestMessage} (`decodeRlsRequest` in ./codec.ts then checks it against
 * Envoy's validation rules and the server's bounds) and writes responses straight from its
 * answers; `sluice bench` writes requests and reads the overall code of responses.
 *
 * The request is read strictly (see ./protobuf.ts): whatever is accepted, protobufjs accepts and
 * decodes to the same message (a differential test holds it to that). Strings are checked for
 * valid UTF-8 as they are read: the first invalid one is named in `invalidUtf8`
 * (`descriptors[0].entries[1].value`), for the request to be refused rather than decoded with
 * U+FFFD in place of distinct bytes.
 */

/** `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry`. */
export interface RateLimitEntry {
  readonly key: string;
  readonly value: string;
}

/** `RateLimitDescriptor.RateLimitOverride`. */
export interface RateLimitOverride {
  readonly requestsPerUnit: number;
  /** `envoy.type.v3.RateLimitUnit` by number, as sent (unknown numbers included). */
  readonly unit: number;
}

/** `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`; absent messages undefined. */
export interface RateLimitDescriptorMessage {
  readonly entries: readonly RateLimitEntry[];
  readonly limit: RateLimitOverride | undefined;
  /** The `google.protobuf.UInt64Value` hits addend's value (uint64). */
  readonly hitsAddend: bigint | undefined;
}

/** `envoy.service.ratelimit.v3.RateLimitRequest`, fields at their proto3 defaults when absent. */
export interface RateLimitRequestMessage {
  readonly domain: string;
  readonly descriptors: readonly RateLimitDescriptorMessage[];
  readonly hitsAddend: number;
}

/** The decoded request, and the first string that is not UTF-8. */
export interface WireRequest {
  readonly request: RateLimitRequestMessage;
  readonly invalidUtf8: string | undefined;
}

/** Wire types of the known fields: 1 and 2 delimited (strings, messages), 3 a varint in the request. */
const REQUEST_FIELDS = (f: number) => (f === 1 || f === 2 ? DELIMITED : f === 3 ? VARINT : undefined);
const DESCRIPTOR_FIELDS = (f: number) => (f >= 1 && f <= 3 ? DELIMITED : undefined);
const ENTRY_FIELDS = (f: number) => (f === 1 || f === 2 ? DELIMITED : undefined);
const VARINT_FIELDS_1_2 = (f: number) => (f === 1 || f === 2 ? VARINT : undefined);
const VARINT_FIELD_1 = (f: number) => (f === 1 ? VARINT : undefined);

function entry(r: Reader, end: number, at: string): RateLimitEntry {
  let key = '';
  let value = '';
  while (r.pos < end) {
    const f = r.field(end, ENTRY_FIELDS);
    if (f === 1) key = r.string(end, `${at}.key`);
    else if (f === 2) value = r.string(end, `${at}.value`);
  }
  return { key, value };
}

function override(r: Reader, end: number): RateLimitOverride {
  let requestsPerUnit = 0;
  let unit = 0;
  while (r.pos < end) {
    const f = r.field(end, VARINT_FIELDS_1_2);
    if (f === 1) requestsPerUnit = r.varint32(end);
    else if (f === 2) unit = r.varint32(end) | 0;
  }
  return { requestsPerUnit, unit };
}

function uint64Value(r: Reader, end: number): bigint {
  let value = 0n;
  while (r.pos < end) {
    if (r.field(end, VARINT_FIELD_1) === 1) value = r.uint64(end);
  }
  return value;
}

function descriptor(r: Reader, end: number, at: string): RateLimitDescriptorMessage {
  const entries: RateLimitEntry[] = [];
  let limit: RateLimitOverride | undefined;
  let hitsAddend: bigint | undefined;
  while (r.pos < end) {
    const f = r.field(end, DESCRIPTOR_FIELDS);
    if (f === 0) continue;
    const stop = r.delimited(end);
    if (f === 1) entries.push(entry(r, stop, `${at}.entries[${entries.length}]`));
    else if (f === 2) limit = override(r, stop);
    else hitsAddend = uint64Value(r, stop);
  }
  return { entries, limit, hitsAddend };
}

/** Reads `RateLimitRequest` bytes; throws a `WireError` (./protobuf.ts) for bytes that are not one. */
export function readRateLimitRequest(bytes: Uint8Array): WireRequest {
  const r = new Reader(bytes);
  const end = bytes.length;
  let domain = '';
  const descriptors: RateLimitDescriptorMessage[] = [];
  let hitsAddend = 0;
  while (r.pos < end) {
    const f = r.field(end, REQUEST_FIELDS);
    if (f === 1) domain = r.string(end, 'domain');
    else if (f === 2) descriptors.push(descriptor(r, r.delimited(end), `descriptors[${descriptors.length}]`));
    else if (f === 3) hitsAddend = r.varint32(end);
  }
  return { request: { domain, descriptors, hitsAddend }, invalidUtf8: r.invalidUtf8 };
}

/** RateLimitResponse.Code by name. */
const CODES: Readonly<Record<string, number>> = { UNKNOWN: 0, OK: 1, OVER_LIMIT: 2 };
/** RateLimitResponse.RateLimit.Unit by Sluice's unit name. */
const RESPONSE_UNITS: Readonly<Record<string, number>> = {
  second: 1,
  minute: 2,
  hour: 3,
  day: 4,
  month: 5,
  year: 6,
  week: 7,
};

/** A RateLimitResponse's status as the service answers it (see `RlsStatus` in ../envoy/rls.ts). */
interface StatusLike {
  readonly code: string;
  readonly currentLimit?: { readonly requestsPerUnit: number; readonly unit: string; readonly name: string };
  readonly limitRemaining: number;
  readonly durationUntilResetMs?: number;
}

/**
 * A `RateLimitResponse` encoded straight from the server's answer (fields at their proto3
 * defaults left out, as protobuf allows; a test holds it to what proto-loader encodes).
 */
export function writeRateLimitResponse(r: { readonly overallCode: string; readonly statuses: readonly StatusLike[] }): Buffer {
  const w = new Writer().uint(1, CODES[r.overallCode] ?? 0);
  for (const s of r.statuses) {
    const status = new Writer().uint(1, CODES[s.code] ?? 0);
    if (s.currentLimit !== undefined) {
      const limit = new Writer()
        .uint(1, s.currentLimit.requestsPerUnit)
        .uint(2, RESPONSE_UNITS[s.currentLimit.unit] ?? 0)
        .string(3, s.currentLimit.name);
      status.message(2, limit);
    }
    status.uint(3, s.limitRemaining);
    if (s.durationUntilResetMs !== undefined) {
      const ms = s.durationUntilResetMs;
      const duration = new Writer().uint(1, Math.floor(ms / 1000)).uint(2, Math.round((ms % 1000) * 1e6));
      status.message(4, duration);
    }
    w.message(2, status);
  }
  return w.done();
}

/**
 * A `RateLimitRequest` as a client sends it (what `sluice bench` sends): its domain and
 * descriptors' entries; no overrides, hits_addend 0 (one hit).
 */
export function writeRateLimitRequest(r: {
  readonly domain: string;
  readonly descriptors: readonly { readonly entries: readonly RateLimitEntry[] }[];
}): Buffer {
  const w = new Writer().string(1, r.domain);
  for (const d of r.descriptors) {
    const descriptor = new Writer();
    for (const e of d.entries) descriptor.message(1, new Writer().string(1, e.key).string(2, e.value));
    w.message(2, descriptor);
  }
  return w.done();
}

const OVERALL_CODE_FIELD = (f: number) => (f === 1 ? VARINT : undefined);

/**
 * A `RateLimitResponse`'s `overall_code` (`RateLimitResponse.Code` by number: 0 UNKNOWN, 1 OK,
 * 2 OVER_LIMIT); the other fields are skipped. Throws a `WireError` for bytes that are not a
 * protobuf message.
 */
export function readOverallCode(bytes: Uint8Array): number {
  const r = new Reader(bytes);
  let code = 0;
  while (r.pos < bytes.length) {
    if (r.field(bytes.length, OVERALL_CODE_FIELD) === 1) code = r.varint32(bytes.length) | 0;
  }
  return code;
}
