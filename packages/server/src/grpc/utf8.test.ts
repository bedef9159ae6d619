import { describe, expect, it } from 'vitest';
import { loadRlsDefinition } from '../../test/proto.js';
import { invalidUtf8Field } from './utf8.js';

const method = loadRlsDefinition().ShouldRateLimit!;
const encode = (request: object) => Buffer.from(method.requestSerialize(request));
const entry = (key: string, value: string) => ({ key, value });

/** `request` encoded, with the byte after the first `marker` in it replaced by `byte`. */
function withByte(request: object, marker: string, byte: number): Buffer {
  const bytes = encode(request);
  bytes[bytes.indexOf(marker) + marker.length] = byte;
  return bytes;
}

describe('invalidUtf8Field', () => {
  const request = {
    domain: 'edgeX',
    hits_addend: 3,
    descriptors: [
      { entries: [entry('a', '1')], limit: { requests_per_unit: 5, unit: 'MINUTE' }, hits_addend: { value: '7' } },
      { entries: [entry('b', '2'), entry('kY', 'vZ')] },
    ],
  };

  it('passes valid messages, U+FFFD and astral characters included', () => {
    expect(invalidUtf8Field(encode(request))).toBeUndefined();
    expect(invalidUtf8Field(encode({ domain: '\ufffd\ud83d\ude00', descriptors: [{ entries: [entry('é', '\ufffd')] }] }))).toBe(
      undefined,
    );
  });

  it('names the string field holding invalid UTF-8', () => {
    for (const byte of [0xfe, 0xff, 0x80, 0xc0]) {
      expect(invalidUtf8Field(withByte(request, 'edge', byte))).toBe('domain');
      expect(invalidUtf8Field(withByte(request, 'k', byte))).toBe('descriptors[1].entries[1].key');
      expect(invalidUtf8Field(withByte(request, 'v', byte))).toBe('descriptors[1].entries[1].value');
    }
  });

  it('refuses surrogates encoded as UTF-8 (CESU-8)', () => {
    const bytes = encode({ domain: 'edge', descriptors: [{ entries: [entry('a', 'xyz')] }] });
    bytes.set([0xed, 0xa0, 0x80], bytes.indexOf('xyz'));
    expect(invalidUtf8Field(bytes)).toBe('descriptors[0].entries[0].value');
  });

  it('leaves bytes that are not a message to the decoder', () => {
    expect(invalidUtf8Field(Buffer.from([0x0a, 0x05, 0x61]))).toBeUndefined();
    expect(invalidUtf8Field(Buffer.from([0x0b]))).toBeUndefined();
    expect(invalidUtf8Field(Buffer.from([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]))).toBeUndefined();
  });
});
