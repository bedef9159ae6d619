import type { OutgoingHttpHeaders, ServerHttp2Stream } from 'node:http2';
/**
 * gRPC over HTTP/2 framing (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md):
 * length-prefixed messages, `grpc-timeout` and `grpc-message`. Pure functions, no I/O.
 */

/** Bytes before each message: a compressed flag (1 byte) and the message length (4, big-endian). */
export const PREFIX_BYTES = 5;

/** The content type of every gRPC answer. */
export const GRPC_CONTENT_TYPE = 'application/grpc+proto';

/** A message framed for a DATA frame: flag 0 (uncompressed), its length, its bytes. */
export function frameMessage(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(PREFIX_BYTES + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, PREFIX_BYTES);
  return out;
}

const TIMEOUT_UNITS_MS: Readonly<Record<string, number>> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/**
 * A `grpc-timeout` value (`TimeoutValue TimeoutUnit`: at most 8 digits and one of H M S m u n)
 * in milliseconds; undefined when absent or malformed (no deadline, as grpc-js does).
 */
export function parseGrpcTimeout(value: unknown): number | undefined {
  if (typeof value !== 'string') return undefined;
  const match = /^(\d{1,8})([HMSmun])$/.exec(value);
  if (match === null) return undefined;
  return Number(match[1]) * TIMEOUT_UNITS_MS[match[2]!]!;
}

/**
 * A `grpc-message` value: percent-encoded UTF-8, every byte outside printable ASCII and `%`
 * itself escaped, as the spec asks (clients decode it).
 */
export function encodeGrpcMessage(message: string): string {
  if (/^[\x20-\x24\x26-\x7e]*$/.test(message)) return message;
  let out = '';
  for (const byte of Buffer.from(message, 'utf8')) {
    out +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** What a request body turned out to be once its stream ended, or as soon as it went wrong. */
export type ReadResult =
  | { readonly kind: 'message'; readonly message: Buffer }
  | { readonly kind: 'too-large'; readonly length: number }
  | { readonly kind: 'compressed' }
  | { readonly kind: 'malformed'; readonly why: string };

/**
 * Collects the one message of a unary call from DATA chunks. `push` returns an outcome as soon
 * as the body is refused (a declared length over `maxBytes`, a compressed message, a second
 * message); `end` returns the outcome once the stream ended.
 */
export class UnaryReader {
  readonly #maxBytes: number;
  #chunks: Buffer[] = [];
  #received = 0;
  #length = -1;

  constructor(maxBytes: number) {
    this.#maxBytes = maxBytes;
  }

  push(chunk: Buffer): ReadResult | undefined {
    this.#received += chunk.length;
    // One chunk is the common case; concatenation only when the prefix or message spans chunks.
    this.#chunks.push(chunk);
    if (this.#length < 0 && this.#received >= PREFIX_BYTES) {
      const head = this.#chunks.length === 1 ? this.#chunks[0]! : this.#flat();
      const flag = head[0]!;
      if (flag === 1) return { kind: 'compressed' };
      if (flag !== 0) return { kind: 'malformed', why: `compressed flag ${flag} is neither 0 nor 1` };
      this.#length = head.readUInt32BE(1);
      if (this.#length > this.#maxBytes) return { kind: 'too-large', length: this.#length };
    }
    if (this.#length >= 0 && this.#received > PREFIX_BYTES + this.#length) {
      return { kind: 'malformed', why: 'more than one request message' };
    }
    return undefined;
  }

  end(): ReadResult {
    if (this.#length < 0 || this.#received < PREFIX_BYTES + this.#length) {
      return { kind: 'malformed', why: this.#received === 0 ? 'no request message' : 'the request message is truncated' };
    }
    const all = this.#chunks.length === 1 ? this.#chunks[0]! : this.#flat();
    return { kind: 'message', message: all.subarray(PREFIX_BYTES, PREFIX_BYTES + this.#length) };
  }

  #flat(): Buffer {
    const all = Buffer.concat(this.#chunks, this.#received);
    this.#chunks = [all];
    return all;
  }
}

/** A trailers-only answer: the status (and any metadata) in the one HEADERS frame. */
export function trailersOnly(stream: ServerHttp2Stream, code: number, message: string, extra: OutgoingHttpHeaders = {}): void {
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  stream.respond(
    {
      ':status': 200,
      'content-type': GRPC_CONTENT_TYPE,
      'grpc-status': String(code),
      'grpc-message': encodeGrpcMessage(message),
      ...extra,
    },
    { endStream: true },
  );
}
