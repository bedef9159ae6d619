import { describe, expect, it } from 'vitest';
import { UnaryReader, encodeGrpcMessage, frameMessage, parseGrpcTimeout } from './framing.js';

describe('gRPC framing', () => {
  it('frames a message with flag 0 and its big-endian length', () => {
    expect([...frameMessage(Buffer.from([7, 8, 9]))]).toEqual([0, 0, 0, 0, 3, 7, 8, 9]);
    expect([...frameMessage(new Uint8Array(0))]).toEqual([0, 0, 0, 0, 0]);
  });

  it('reads grpc-timeout in every unit and ignores malformed ones', () => {
    expect(parseGrpcTimeout('2H')).toBe(7_200_000);
    expect(parseGrpcTimeout('3M')).toBe(180_000);
    expect(parseGrpcTimeout('20S')).toBe(20_000);
    expect(parseGrpcTimeout('150m')).toBe(150);
    expect(parseGrpcTimeout('5000u')).toBe(5);
    expect(parseGrpcTimeout('1000000n')).toBe(1);
    for (const bad of [undefined, '', '10', 'm', '123456789S', '-1S', '1.5S', '10s'])
      expect(parseGrpcTimeout(bad)).toBeUndefined();
  });

  it('percent-encodes grpc-message beyond printable ASCII, and % itself', () => {
    expect(encodeGrpcMessage('plain: text (ok)')).toBe('plain: text (ok)');
    expect(encodeGrpcMessage('50% é\n')).toBe('50%25 %C3%A9%0A');
    expect(decodeURIComponent(encodeGrpcMessage('ünïcode ✓ %'))).toBe('ünïcode ✓ %');
  });

  it('collects one message from chunks split anywhere', () => {
    const framed = frameMessage(Buffer.from('hello'));
    for (let cut = 0; cut <= framed.length; cut++) {
      const r = new UnaryReader(100);
      expect(r.push(framed.subarray(0, cut))).toBeUndefined();
      expect(r.push(framed.subarray(cut))).toBeUndefined();
      const out = r.end();
      expect(out.kind).toBe('message');
      if (out.kind === 'message') expect(out.message.toString()).toBe('hello');
    }
  });

  it('refuses a declared length over the bound as soon as the prefix is in', () => {
    const r = new UnaryReader(4);
    expect(r.push(Buffer.from([0, 0, 0, 0, 5]))).toEqual({ kind: 'too-large', length: 5 });
    const exact = new UnaryReader(5);
    expect(exact.push(frameMessage(Buffer.from('12345')))).toBeUndefined();
    expect(exact.end().kind).toBe('message');
  });

  it('tells compressed messages, bad flags, truncation, absence and a second message apart', () => {
    expect(new UnaryReader(10).push(Buffer.from([1, 0, 0, 0, 0]))).toEqual({ kind: 'compressed' });
    expect(new UnaryReader(10).push(Buffer.from([2, 0, 0, 0, 0]))?.kind).toBe('malformed');
    const truncated = new UnaryReader(10);
    truncated.push(Buffer.from([0, 0, 0, 0, 3, 1]));
    expect(truncated.end()).toEqual({ kind: 'malformed', why: 'the request message is truncated' });
    expect(new UnaryReader(10).end()).toEqual({ kind: 'malformed', why: 'no request message' });
    const two = new UnaryReader(10);
    expect(two.push(frameMessage(Buffer.from('a')))).toBeUndefined();
    expect(two.push(frameMessage(Buffer.from('b')))).toEqual({ kind: 'malformed', why: 'more than one request message' });
  });
});
