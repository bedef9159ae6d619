/* eslint-disable @typescript-eslint/no-explicit-any --
   proto-loader's messages are untyped */
import { describe, expect, it } from 'vitest';
import { loadRlqsDefinition } from '../../test/proto.js';
import { ServerError } from '../errors.js';
import { decodeUsageReports, writeQuotaResponse } from './rlqs-wire.js';
import { MessageReader } from './stream-reader.js';
import { frameMessage } from './framing.js';

const method = loadRlqsDefinition().StreamRateLimitQuotas!;
const BOUNDS = { maxBuckets: 10, maxPairs: 4, maxKeyLength: 32 };
const usage = (bucket: object, extra: object = {}) => ({
  bucket_id: { bucket },
  time_elapsed: { seconds: 1, nanos: 500_000_000 },
  ...extra,
});

function code(run: () => unknown): string {
  try {
    run();
  } catch (e) {
    if (e instanceof ServerError) return `${e.code} ${e.message}`;
    throw e;
  }
  return 'accepted';
}

describe('usage reports', () => {
  it('decodes what @grpc/proto-loader encodes', () => {
    const bytes = method.requestSerialize({
      domain: 'gateway',
      bucket_quota_usages: {
        '7': usage({ name: 'a', env: 'prod' }, { num_requests_allowed: 12, num_requests_denied: 3, last_report: { seconds: 5 } }),
        '18446744073709551615': usage({ name: 'b' }),
      },
    });
    expect(decodeUsageReports(bytes, BOUNDS)).toEqual({
      domain: 'gateway',
      usages: [
        { bucket: { name: 'a', env: 'prod' }, elapsedMs: 1500, allowed: 12, denied: 3 },
        { bucket: { name: 'b' }, elapsedMs: 1500, allowed: 0, denied: 0 },
      ],
    });
  });

  it("refuses what Envoy's rules or the bounds refuse, naming the field", () => {
    const report = (usages: object, domain = 'gateway') =>
      code(() => decodeUsageReports(method.requestSerialize({ domain, bucket_quota_usages: usages }), BOUNDS));
    expect(report({ '1': { time_elapsed: { seconds: 1 } } })).toBe(
      'SLUICE_ERR_INVALID_REQUEST bucket_quota_usages[1].bucket_id: must have at least one pair',
    );
    expect(report({ '1': usage({ name: '' }) })).toContain('keys and values must not be empty');
    expect(report({ '1': usage({ a: '1', b: '2', c: '3', d: '4', e: '5' }) })).toContain('must have at most 4 pairs');
    expect(report({ '1': { bucket_id: { bucket: { a: 'b' } } } })).toBe(
      'SLUICE_ERR_INVALID_REQUEST bucket_quota_usages[1].time_elapsed: is required',
    );
    expect(report({ '1': usage({ a: 'b' }, { time_elapsed: { seconds: 0 } }) })).toContain('time_elapsed: must be above 0');
    expect(report({ '1': usage({ a: 'b' }, { time_elapsed: { seconds: -1 } }) })).toContain('time_elapsed: must be above 0');
    expect(report({ '1': usage({ a: 'b' }, { num_requests_allowed: '1000000001' }) })).toContain(
      'num_requests_allowed: must be at most 1000000000',
    );
    expect(report({ '1': usage({ a: 'b' }) }, 'x'.repeat(33))).toContain('domain: must be at most 32 characters');
    const many = Object.fromEntries(Array.from({ length: 11 }, (_, i) => [String(i), usage({ n: String(i) })]));
    expect(report(many)).toBe('SLUICE_ERR_BATCH_TOO_LARGE at most 10 buckets per report, got 11');
    expect(code(() => decodeUsageReports(Buffer.from([0x10, 0x01]), BOUNDS))).toMatch(
      /^SLUICE_ERR_MALFORMED_BODY not a RateLimitQuotaUsageReports: /,
    );
    // A string that is not UTF-8.
    expect(code(() => decodeUsageReports(Buffer.from([0x0a, 0x01, 0xff]), BOUNDS))).toContain('domain is not valid UTF-8');
  });

  it('keeps a bucket key named __proto__ as a plain pair', () => {
    const r = decodeUsageReports(
      method.requestSerialize({ domain: 'g', bucket_quota_usages: { '1': usage(JSON.parse('{"__proto__": "x"}') as object) } }),
      BOUNDS,
    );
    expect(Object.keys(r.usages[0]!.bucket)).toEqual(['__proto__']);
  });
});

describe('quota responses', () => {
  it('are read by @grpc/proto-loader as the actions they are', () => {
    const bytes = writeQuotaResponse([
      {
        kind: 'assign',
        bucket: { name: 'a' },
        ttlMs: 1500,
        strategy: { kind: 'token-bucket', maxTokens: 3, tokensPerFill: 3, fillIntervalMs: 250 },
      },
      { kind: 'assign', bucket: { name: 'b', env: 'x' }, ttlMs: 60_000, strategy: { kind: 'deny-all' } },
      { kind: 'abandon', bucket: { name: 'c' } },
    ]);
    const r = method.responseDeserialize(bytes) as any;
    expect(r.bucket_action).toHaveLength(3);
    const [a, b, c] = r.bucket_action;
    expect(a.bucket_id.bucket).toEqual({ name: 'a' });
    expect(a.bucket_action).toBe('quota_assignment_action');
    expect(a.quota_assignment_action.assignment_time_to_live).toEqual({ seconds: '1', nanos: 500_000_000 });
    expect(a.quota_assignment_action.rate_limit_strategy.strategy).toBe('token_bucket');
    expect(a.quota_assignment_action.rate_limit_strategy.token_bucket).toMatchObject({
      max_tokens: 3,
      tokens_per_fill: { value: 3 },
      fill_interval: { seconds: '0', nanos: 250_000_000 },
    });
    expect(b.bucket_id.bucket).toEqual({ name: 'b', env: 'x' });
    expect(b.quota_assignment_action.rate_limit_strategy).toMatchObject({ strategy: 'blanket_rule', blanket_rule: 'DENY_ALL' });
    expect(c.bucket_action).toBe('abandon_action');
    expect(c.bucket_id.bucket).toEqual({ name: 'c' });
  });
});

describe('MessageReader', () => {
  it('splits messages wherever the DATA chunks cut them', () => {
    const one = frameMessage(Buffer.from('first'));
    const two = frameMessage(Buffer.from('second!'));
    const all = Buffer.concat([one, two]);
    for (let cut = 0; cut <= all.length; cut++) {
      const r = new MessageReader(100);
      const a = r.push(all.subarray(0, cut));
      const b = r.push(all.subarray(cut));
      const got = [a, b].flatMap((x) => (x.kind === 'messages' ? x.messages.map(String) : [x.kind]));
      expect(got).toEqual(['first', 'second!']);
      expect(r.clean).toBe(true);
    }
    const partial = new MessageReader(100);
    partial.push(one.subarray(0, 3));
    expect(partial.clean).toBe(false);
  });

  it('refuses a message over the bound before it arrives, and a compressed one', () => {
    const big = Buffer.alloc(5);
    big.writeUInt32BE(101, 1);
    expect(new MessageReader(100).push(big)).toEqual({ kind: 'too-large', length: 101 });
    expect(new MessageReader(100).push(Buffer.from([1, 0, 0, 0, 0]))).toEqual({ kind: 'compressed' });
    expect(new MessageReader(100).push(Buffer.from([2, 0, 0, 0, 0]))).toMatchObject({ kind: 'malformed' });
  });
});
