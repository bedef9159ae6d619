import { PREFIX_BYTES } from './framing.js';

/** What a chunk of a streaming call's body held: its complete messages, or why it is refused. */
export type StreamRead =
  | { readonly kind: 'messages'; readonly messages: readonly Buffer[] }
  | { readonly kind: 'too-large'; readonly length: number }
  | { readonly kind: 'compressed' }
  | { readonly kind: 'malformed'; readonly why: string };

/**
 * Splits the body of a client-streaming call into its length-prefixed messages as DATA chunks
 * arrive. A message declaring more than `maxBytes` is refused before it is buffered, as is a
 * compressed one; at most one incomplete message is held.
 */
export class MessageReader {
  readonly #maxBytes: number;
  #pending: Buffer = Buffer.alloc(0);

  constructor(maxBytes: number) {
    this.#maxBytes = maxBytes;
  }

  /** The messages `chunk` completes. */
  push(chunk: Buffer): StreamRead {
    let buf = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    const messages: Buffer[] = [];
    while (buf.length >= PREFIX_BYTES) {
      const flag = buf[0]!;
      if (flag === 1) return { kind: 'compressed' };
      if (flag !== 0) return { kind: 'malformed', why: `compressed flag ${flag} is neither 0 nor 1` };
      const length = buf.readUInt32BE(1);
      if (length > this.#maxBytes) return { kind: 'too-large', length };
      if (buf.length < PREFIX_BYTES + length) break;
      messages.push(Buffer.from(buf.subarray(PREFIX_BYTES, PREFIX_BYTES + length)));
      buf = buf.subarray(PREFIX_BYTES + length);
    }
    this.#pending = buf.length === 0 ? Buffer.alloc(0) : Buffer.from(buf);
    return { kind: 'messages', messages };
  }

  /** Whether the body ended between messages (not inside one). */
  get clean(): boolean {
    return this.#pending.length === 0;
  }
}
