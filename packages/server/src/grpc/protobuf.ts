import { isUtf8 } from 'node:buffer';

/**
 * Protobuf's encoding (https://protobuf.dev/programming-guides/encoding/) read and written by
 * hand, for the few small messages the gRPC port and `sluice bench` exchange (./wire.ts,
 * ./outcomes.ts): no schema loaded at run time, no message objects.
 *
 * The {@link Reader} is strict: a field of the wrong wire type, a length or varint running past
 * its message, a varint longer than 10 bytes, a group (proto3 has none) are refused with a
 * {@link WireError}. Whatever it accepts, protobufjs accepts and decodes alike (the differential
 * tests of each message hold it to that); protobufjs accepts more (it cuts a string running past
 * the end, reads a known field whatever its wire type), which is refused here as the malformed
 * message it is.
 */

/** Thrown for bytes that are not the message they are read as; the message says why. */
export class WireError extends Error {}

export const VARINT = 0;
export const FIXED64 = 1;
export const DELIMITED = 2;
export const FIXED32 = 5;

/** Reads fields from `buf`, each method from `pos` and within an `end` (its message's end). */
export class Reader {
  pos = 0;
  /** The path of the first string read that is not valid UTF-8 (see {@link string}). */
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

  /**
   * A bool: a varint of 0 or 1, as every encoder writes one, in 1 to 5 bytes or 10 (as
   * {@link varint32}). Other values are refused: decoders disagree on them (protobufjs reads the
   * low 32 bits, so 2^32 is false; others read any non-zero value as true).
   */
  bool(end: number): boolean {
    const at = this.pos;
    const value = this.uint64(end);
    const length = this.pos - at;
    if (length > 5 && length < 10) throw new WireError(`a bool varint of ${length} bytes at offset ${this.pos}`);
    if (value > 1n) throw new WireError(`a bool of value ${value} at offset ${at}`);
    return value === 1n;
  }

  /** A double: 8 bytes, little-endian IEEE 754. */
  double(end: number): number {
    if (8 > end - this.pos) throw new WireError(`a double runs past its message at offset ${this.pos}`);
    const b = this.buf;
    const value = Buffer.from(b.buffer, b.byteOffset, b.length).readDoubleLE(this.pos);
    this.pos += 8;
    return value;
  }

  /** The end of the length-delimited field starting here, within `end`. */
  delimited(end: number): number {
    const length = this.varint32(end);
    if (length > end - this.pos) throw new WireError(`a length of ${length} runs past its message at offset ${this.pos}`);
    return this.pos + length;
  }

  /**
   * A string. One that is not valid UTF-8 is decoded with U+FFFD in its place and, if it is the
   * first, named by `path` in {@link invalidUtf8}, for the caller to refuse the message: strings
   * that differ only in invalid bytes would otherwise read alike.
   */
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
        // Any varint of up to 10 bytes: an unknown field may be 64 bits wide.
        for (let i = 0; ; i++) {
          if (i === 10) throw new WireError(`a varint is longer than 10 bytes at offset ${this.pos}`);
          if (this.pos >= end) throw new WireError(`a varint runs past its message at offset ${this.pos}`);
          if (this.buf[this.pos++]! < 128) return;
        }
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

  /**
   * The next field's number, having checked that a known one has the wire type `expected` gives;
   * 0 for an unknown field, skipped.
   */
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

/** Appends protobuf fields; `done()` returns the message. Fields at their proto3 default are left out. */
export class Writer {
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

  bool(field: number, b: boolean): this {
    return this.uint(field, b ? 1 : 0);
  }

  bytes(field: number, b: ArrayLike<number>): this {
    this.tag(field, DELIMITED).varint(b.length);
    for (let i = 0; i < b.length; i++) this.#out.push(b[i]!);
    return this;
  }

  string(field: number, s: string): this {
    return s === '' ? this : this.bytes(field, Buffer.from(s, 'utf8'));
  }

  /** A message field; present even when empty (an empty message is not absent). */
  message(field: number, inner: Writer): this {
    return this.bytes(field, inner.#out);
  }

  done(): Buffer {
    return Buffer.from(this.#out);
  }
}
