import { isUtf8 } from 'node:buffer';

/**
 * `RateLimitRequest` bytes read straight into a typed {@link RateLimitRequestMessage}, without
 * protobufjs' message objects: the gRPC port's per-call decoding (`decodeRlsRequest` in
 * ./codec.ts then checks it against Envoy's validation rules and the server's bounds).
 *
 * It reads by the protobuf encoding's rules, strictly: a field of the wrong wire type, a length
 * or varint running past its message, a varint longer than 10 bytes, a group (proto3 has none)
 * are refused. Whatever it accepts, protobufjs accepts and decodes to the same message (a
 * differential test holds it to that); protobufjs accepts more (it cuts a string running past
 * the end, reads a known field whatever its wire type), which is refused here as the malformed
 * message it is. Strings are checked for valid UTF-8 as they are read: the first invalid one is
 * named in `invalidUtf8` (`descriptors[0].entries[1].value`), for the request to be refused
 * rather than decoded with U+FFFD in place of distinct bytes.
 */

/** Thrown for bytes that are not a `RateLimitRequest`; the message says why. */
export class WireError extends Error {}

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

const VARINT = 0;
const FIXED64 = 1;
const DELIMITED = 2;
const FIXED32 = 5;

class Reader {
  pos = 0;
  invalidUtf8: string | undefined;
  constructor(readonly buf: Uint8Array) {}

  /**
   * A 32-bit varint ending before `end`: its low 32 bits. It takes at most 5 bytes, or exactly 10
   * (a negative int32, sign-extended); 6 to 9 are refused (protobufjs would read 10 regardless).
   */
  varint32(end: number): number {
    let value = 0;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= end) throw new WireError(`a varint runs past its message at offset ${this.pos}`);
      const byte = this.buf[this.pos++]!;
      // Bits 32 and above are dropped, as for a uint32 or an int32 (two's complement) on the wire.
      if (i < 5) value = (value | ((byte & 127) << (7 * i))) >>> 0;
      if (byte < 128) {
        if (i >= 5 && i < 9) throw new WireError(`a 32-bit varint of ${i + 1} bytes at offset ${this.pos}`);
        return value;
      }
    }
    throw new WireError(`a varint is longer than 10 bytes at offset ${this.pos}`);
  }

  /** An unsigned varint of up to 10 bytes. */
  uint64(end: number): bigint {
    let value = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (this.pos >= end) throw new WireError(`a varint runs past its message at offset ${this.pos}`);
      const byte = this.buf[this.pos++]!;
      value |= BigInt(byte & 127) << shift;
      if (byte < 128) return BigInt.asUintN(64, value);
    }
    throw new WireError(`a varint is longer than 10 bytes at offset ${this.pos}`);
  }

  /** The end of the length-delimited field starting here, within `end`. */
  delimited(end: number): number {
    const length = this.varint32(end);
    if (length > end - this.pos) throw new WireError(`a length of ${length} runs past its message at offset ${this.pos}`);
    return this.pos + length;
  }

  string(end: number, path: string): string {
    const stop = this.delimited(end);
    const bytes = this.buf.subarray(this.pos, stop);
    this.pos = stop;
    if (this.invalidUtf8 === undefined && !isUtf8(bytes)) this.invalidUtf8 = path;
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('utf8');
  }

  skip(wireType: number, end: number): void {
    let length: number;
    switch (wireType) {
      case VARINT:
        this.varint32(end);
        return;
      case FIXED64:
        length = 8;
        break;
      case DELIMITED:
        this.pos = this.delimited(end);
        return;
      case FIXED32:
        length = 4;
        break;
      default:
        throw new WireError(`wire type ${wireType} at offset ${this.pos} is not accepted`);
    }
    if (length > end - this.pos) throw new WireError(`a field runs past its message at offset ${this.pos}`);
    this.pos += length;
  }

  /** The next field's number, having checked that a known one has the wire type `expected` gives. */
  field(end: number, expected: (field: number) => number | undefined): number {
    const tag = this.varint32(end);
    const field = tag >>> 3;
    const wireType = tag & 7;
    if (field === 0) throw new WireError(`field number 0 at offset ${this.pos}`);
    const want = expected(field);
    if (want === undefined) {
      this.skip(wireType, end);
      return 0;
    }
    if (wireType !== want) throw new WireError(`field ${field} has wire type ${wireType}, not ${want}, at offset ${this.pos}`);
    return field;
  }
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

/** Reads `RateLimitRequest` bytes; throws a {@link WireError} for bytes that are not one. */
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

/** Appends protobuf fields to a list of chunks; `bytes()` joins them. */
class Writer {
  readonly #out: number[] = [];

  varint(n: number): this {
    let v = n;
    while (v > 127) {
      this.#out.push((v & 127) | 128);
      v = Math.floor(v / 128);
    }
    this.#out.push(v);
    return this;
  }

  tag(field: number, wireType: number): this {
    return this.varint((field << 3) | wireType);
  }

  uint(field: number, n: number): this {
    return n === 0 ? this : this.tag(field, VARINT).varint(n);
  }

  bytes(field: number, b: ArrayLike<number>): this {
    this.tag(field, DELIMITED).varint(b.length);
    for (let i = 0; i < b.length; i++) this.#out.push(b[i]!);
    return this;
  }

  string(field: number, s: string): this {
    return s === '' ? this : this.bytes(field, Buffer.from(s, 'utf8'));
  }

  message(field: number, inner: Writer): this {
    return this.bytes(field, inner.#out);
  }

  done(): Buffer {
    return Buffer.from(this.#out);
  }
}

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
