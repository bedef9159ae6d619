import { describe, expect, it } from 'vitest';
import { StreamErrorCodes, isStreamError } from '../errors.js';
import { hashValue } from '../events/codec.js';
import { MAX_DECISIONS_PER_MESSAGE, decodeDecisions, encodeDecisions, type GovernanceDecision } from './codec.js';

function decision(overrides: Partial<GovernanceDecision> = {}): GovernanceDecision {
  return {
    action: 'block',
    dimension: 'user',
    value: hashValue('mallory'),
    ttlMs: 3000,
    retryAfterMs: 1500,
    ruleId: 'login-failures',
    issuedAtMs: 1_764_000_000_000,
    ...overrides,
  };
}

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return isStreamError(err) ? err.code : 'not a StreamError';
  }
  return undefined;
}

describe('decision codec', () => {
  it('round-trips every action and dimension', () => {
    const ds: GovernanceDecision[] = [
      decision(),
      decision({ action: 'lift', ttlMs: 0, retryAfterMs: 0, ruleId: '' }),
      decision({ dimension: 'resource', value: 0xffffffff, ttlMs: 3_600_000, issuedAtMs: Number.MAX_SAFE_INTEGER }),
      decision({ dimension: 'path', ruleId: 'règle-用户-🚀' }),
      decision({ dimension: 'ip', ruleId: 'x'.repeat(64) }),
      decision({ dimension: 'tenant', value: 1, issuedAtMs: 0 }),
    ];
    expect(decodeDecisions(encodeDecisions(ds))).toEqual(ds);
    expect(decodeDecisions(encodeDecisions([]))).toEqual([]);
  });

  it('refuses decisions with fields out of range', () => {
    const bad: Partial<GovernanceDecision>[] = [
      { action: 'ban' as 'block' },
      { dimension: 'country' as 'ip' },
      { value: 0 },
      { value: 2 ** 32 },
      { ttlMs: 0 },
      { ttlMs: 3_600_001 },
      { ttlMs: 1.5 },
      { retryAfterMs: -1 },
      { ruleId: 'x'.repeat(65) },
      { issuedAtMs: -1 },
    ];
    for (const b of bad) expect(codeOf(() => encodeDecisions([decision(b)]))).toBe(StreamErrorCodes.INVALID_RECORD);
  });

  it('refuses more decisions than one message may carry', () => {
    const many = Array.from({ length: MAX_DECISIONS_PER_MESSAGE + 1 }, () => decision());
    expect(codeOf(() => encodeDecisions(many))).toBe(StreamErrorCodes.BATCH_TOO_LARGE);
    expect(decodeDecisions(encodeDecisions(many.slice(1)))).toHaveLength(MAX_DECISIONS_PER_MESSAGE);
  });

  it('rejects truncated and padded input', () => {
    const bytes = encodeDecisions([decision(), decision({ ruleId: 'r2' })]);
    for (let n = 0; n < bytes.length; n++) {
      expect(codeOf(() => decodeDecisions(bytes.subarray(0, n)))).toBe(StreamErrorCodes.MALFORMED);
    }
    expect(codeOf(() => decodeDecisions(new Uint8Array([...bytes, 0])))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('rejects foreign input and oversized counts', () => {
    expect(codeOf(() => decodeDecisions(new TextEncoder().encode('{"action":"block"}')))).toBe(StreamErrorCodes.MALFORMED);
    const events = new Uint8Array([0x53, 0x4c, 0x45, 1, 0, 0, 0, 0]);
    expect(codeOf(() => decodeDecisions(events))).toBe(StreamErrorCodes.MALFORMED);
    const huge = new Uint8Array([0x53, 0x4c, 0x44, 1, 0xff, 0xff, 0xff, 0xff]);
    expect(codeOf(() => decodeDecisions(huge))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('rejects records with out-of-range fields', () => {
    const at = (offset: number, value: number): Uint8Array => {
      const bytes = encodeDecisions([decision()]);
      bytes[8 + offset] = value;
      return bytes;
    };
    const zeroTtl = encodeDecisions([decision()]);
    zeroTtl.fill(0, 16, 20);
    const badUtf8 = encodeDecisions([decision({ ruleId: 'ab' })]);
    badUtf8[8 + 24] = 0xff;
    for (const bytes of [at(0, 3), at(1, 0), at(1, 6), at(3, 1), at(8, 0xff), at(12, 0xff), at(16, 0xff), zeroTtl, badUtf8]) {
      expect(codeOf(() => decodeDecisions(bytes))).toBe(StreamErrorCodes.MALFORMED);
    }
  });
});
