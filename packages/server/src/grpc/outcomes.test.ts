import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_OUTCOME_COUNT, MAX_OUTCOME_DURATION_MS } from '../bounds/bounds.js';
import { ServerError, ServerErrorCodes } from '../errors.js';
import { loadOutcomesDefinition } from '../../test/proto.js';
import { decodeOutcomes, encodeOutcomeResults, readReportOutcomesRequest, type OutcomeMessage } from './outcomes.js';
import { WireError } from './protobuf.js';

const method = loadOutcomesDefinition().Report!;
const BOUNDS = { maxBatch: 8, maxKeyLength: 16, maxCalls: 100 };

interface LoaderOutcome {
  resource: string;
  key: string;
  ok: boolean;
  duration_ms: number;
  count: number;
}

/** proto-loader's decoding of `bytes` (keepCase, defaults) as the typed outcomes. */
function decoded(bytes: Uint8Array): OutcomeMessage[] {
  const o = method.requestDeserialize(Buffer.from(bytes)) as { outcomes: LoaderOutcome[] };
  return o.outcomes.map((x) => ({ resource: x.resource, key: x.key, ok: x.ok, durationMs: x.duration_ms, count: x.count }));
}

const encode = (outcomes: object[]): Buffer => Buffer.from(method.requestSerialize({ outcomes }));

/** Outcomes as proto-loader takes them: any field may be left out; strings, doubles and uint32s of every kind. */
const outcome = fc.record(
  {
    resource: fc.oneof(fc.constantFrom('', 'db', 'api:payments', 'ü🙂'), fc.string({ unit: 'binary', maxLength: 12 })),
    key: fc.oneof(fc.constantFrom('', 'k', 'x'.repeat(200)), fc.string({ unit: 'binary', maxLength: 12 })),
    ok: fc.boolean(),
    duration_ms: fc.oneof(fc.constantFrom(0, 7.5, -1, MAX_OUTCOME_DURATION_MS), fc.double()),
    count: fc.oneof(fc.constantFrom(0, 1, MAX_OUTCOME_COUNT + 1), fc.nat({ max: 4294967295 })),
  },
  { requiredKeys: [] },
);
const request = fc.array(outcome, { maxLength: 5 });

/** A byte changed, the message cut, or a byte inserted, at a place given as a fraction of its length. */
const mutation = fc.record({
  kind: fc.constantFrom('set', 'cut', 'insert'),
  at: fc.double({ min: 0, max: 1, noNaN: true }),
  byte: fc.nat(255),
});

function mutate(bytes: Buffer, mutations: readonly { kind: string; at: number; byte: number }[]): Buffer {
  let out = Buffer.from(bytes);
  for (const m of mutations) {
    if (out.length === 0) break;
    const at = Math.min(out.length - 1, Math.floor(m.at * out.length));
    if (m.kind === 'set') out[at] = m.byte;
    else if (m.kind === 'cut') out = out.subarray(0, at);
    else out = Buffer.concat([out.subarray(0, at), Buffer.from([m.byte]), out.subarray(at)]);
  }
  return out;
}

/** A varint of `n` in its shortest form and `pad` bytes more (10 at most), the same value as loose encoders may write it. */
function varint(n: bigint, pad: number): number[] {
  const groups: number[] = [];
  let v = n;
  do {
    groups.push(Number(v & 127n));
    v >>= 7n;
  } while (v > 0n);
  for (let extra = Math.min(pad, 10 - groups.length); extra > 0; extra--) groups.push(0);
  return groups.map((g, i) => (i < groups.length - 1 ? g | 128 : g));
}

/** An outcome as a loose encoder may write it: any varint value for ok and count, fields repeated or left out. */
const looseOutcome = fc.record(
  {
    resource: fc.constantFrom('db', '', 'ü🙂'),
    key: fc.constantFrom('k', ''),
    ok: fc.oneof(fc.constantFrom(0n, 1n), fc.bigInt({ min: 0n, max: 2n ** 64n - 1n })),
    duration: fc.double(),
    count: fc.oneof(fc.constantFrom(0n, 1n, 3n), fc.bigInt({ min: 0n, max: 2n ** 64n - 1n })),
    unknown: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
  },
  { requiredKeys: [] },
);

type LooseOutcome = typeof looseOutcome extends fc.Arbitrary<infer T> ? T : never;

/**
 * A ReportOutcomesRequest written field by field, each varint (tags, lengths, values) padded by
 * the next of `pads`: what a strict reader must read as protobufjs does, or refuse.
 */
function looseRequest(outcomes: readonly LooseOutcome[], pads: readonly number[]): Buffer {
  let n = 0;
  const v = (value: bigint) => varint(value, pads[n++ % pads.length]!);
  const tag = (field: number, wireType: number) => v(BigInt((field << 3) | wireType));
  const delimited = (field: number, body: number[]) => [...tag(field, 2), ...v(BigInt(body.length)), ...body];
  const out: number[] = [];
  for (const o of outcomes) {
    const body: number[] = [];
    if (o.resource !== undefined) body.push(...delimited(1, [...Buffer.from(o.resource)]));
    if (o.key !== undefined) body.push(...delimited(2, [...Buffer.from(o.key)]));
    if (o.ok !== undefined) body.push(...tag(3, 0), ...v(o.ok));
    if (o.duration !== undefined) {
      const d = Buffer.alloc(8);
      d.writeDoubleLE(o.duration);
      body.push(...tag(4, 1), ...d);
    }
    if (o.count !== undefined) body.push(...tag(5, 0), ...v(o.count));
    if (o.unknown !== undefined) body.push(...tag(9, 0), ...v(o.unknown));
    out.push(...delimited(1, body));
  }
  return Buffer.from(out);
}

/** Whatever the reader accepts, proto-loader accepts and decodes alike; true when it was accepted. */
function sameAsProtoLoader(bytes: Buffer): boolean {
  let mine: OutcomeMessage[];
  try {
    mine = readReportOutcomesRequest(bytes);
  } catch (err) {
    expect(err).toBeInstanceOf(WireError);
    return false;
  }
  expect(decoded(bytes), bytes.toString('hex')).toEqual(mine);
  return true;
}

/** The ServerError `decodeOutcomes` throws for `bytes`. */
function refusal(bytes: Buffer): ServerError {
  try {
    decodeOutcomes(bytes, BOUNDS);
  } catch (err) {
    expect(err).toBeInstanceOf(ServerError);
    return err as ServerError;
  }
  throw new Error(`${bytes.toString('hex')} was accepted`);
}

describe('readReportOutcomesRequest', () => {
  it('reads what proto-loader encodes into the outcomes proto-loader decodes', () => {
    fc.assert(
      fc.property(request, (outcomes) => {
        const bytes = encode(outcomes);
        // Strings are encoded from valid UTF-16 only, so every one is valid UTF-8.
        expect(readReportOutcomesRequest(bytes)).toEqual(decoded(bytes));
      }),
      { numRuns: 2000 },
    );
  });

  it('accepts only mutated and random bytes proto-loader accepts, and decodes them alike', () => {
    let accepted = 0;
    let runs = 0;
    fc.assert(
      fc.property(
        fc.oneof(
          request.chain((outcomes) =>
            fc.array(mutation, { minLength: 1, maxLength: 3 }).map((ms) => mutate(encode(outcomes), ms)),
          ),
          fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)),
        ),
        (bytes) => {
          runs++;
          if (sameAsProtoLoader(bytes)) accepted++;
        },
      ),
      { numRuns: 10_000 },
    );
    // Many mutated messages stayed well-formed: the comparison was not vacuous.
    expect(accepted).toBeGreaterThan(runs / 10);
  });

  it('reads varints of any length and value as protobufjs does, or refuses them', () => {
    let accepted = 0;
    let runs = 0;
    const pads = fc.array(fc.oneof({ weight: 6, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.nat(9) }), {
      minLength: 1,
      maxLength: 8,
    });
    fc.assert(
      fc.property(fc.array(looseOutcome, { maxLength: 4 }), pads, (outcomes, p) => {
        runs++;
        if (sameAsProtoLoader(looseRequest(outcomes, p))) accepted++;
      }),
      { numRuns: 5000 },
    );
    expect(accepted).toBeGreaterThan(runs / 10);
  });

  it('refuses what protobufjs lets through, as a malformed ReportOutcomesRequest', () => {
    const cases: Record<string, string> = {
      // outcomes[0] says 5 bytes, 2 follow
      'a message running past the end': '0a050a0164',
      // outcomes[0].resource says 3 bytes, 1 follows within the outcome
      'a string running past its outcome': '0a030a0364' + '0a0164',
      'outcomes as a varint': '0801',
      'resource as a varint': '0a020801',
      'ok as a string': '0a031a0161',
      'duration_ms as a varint (not a double)': '0a022001',
      'duration_ms cut short': '0a05210000f03f',
      'count as a fixed32': '0a052d01000000',
      'a bool of 2': '0a021802',
      'a bool of 2^32': '0a06188080808010',
      'a bool of 6 bytes': '0a07188180808080' + '00',
      'a 32-bit varint of 6 bytes': '0a07288080808080' + '00',
      'outcomes as a group': '0b0c',
      'an unknown group': '1314',
      'field number 0': '0000',
    };
    for (const [what, hex] of Object.entries(cases)) {
      const bytes = Buffer.from(hex, 'hex');
      expect(() => readReportOutcomesRequest(bytes), what).toThrow(WireError);
      const err = refusal(bytes);
      expect(err.code, what).toBe(ServerErrorCodes.MALFORMED_BODY);
      expect(err.message, what).toMatch(/^not a ReportOutcomesRequest: /);
    }
  });

  it('refuses a string that is not UTF-8, naming it, where protobufjs reads U+FFFD', () => {
    const bytes = encode([
      { resource: 'db', key: 'aa', ok: true },
      { resource: 'db', key: 'bb', ok: true },
    ]);
    bytes[bytes.lastIndexOf(Buffer.from('bb'))] = 0xff;
    expect(decoded(bytes)[1]!.key).toBe('\ufffdb');
    const err = refusal(bytes);
    expect(err.code).toBe(ServerErrorCodes.MALFORMED_BODY);
    expect(err.message).toBe('not a ReportOutcomesRequest: outcomes[1].key is not valid UTF-8');
  });

  it('skips unknown fields of every wire type, as protobufjs does', () => {
    // outcomes[0] { resource "db", field 9 varint, field 10 fixed64, field 11 bytes, field 12 fixed32, ok true }, field 2 varint
    const bytes = Buffer.from(
      '0a19' + '0a026462' + '4801' + '510000000000000000' + '5a0178' + '6501020304' + '1801' + '1005',
      'hex',
    );
    expect(readReportOutcomesRequest(bytes)).toEqual([{ resource: 'db', key: '', ok: true, durationMs: 0, count: 0 }]);
    expect(sameAsProtoLoader(bytes)).toBe(true);
  });
});

describe('decodeOutcomes', () => {
  it('answers each outcome: the item, or why it is refused', () => {
    const items = decodeOutcomes(
      encode([
        { resource: 'db', ok: false, duration_ms: 7.5 },
        { resource: 'db', key: 'k', ok: true, duration_ms: 1, count: 3 },
        { resource: '', ok: true, duration_ms: 1 },
        { resource: 'db', key: 'k'.repeat(17), ok: true, duration_ms: 1 },
        { resource: 'db', ok: true, duration_ms: -1 },
        { resource: 'db', ok: true, duration_ms: NaN },
        { resource: 'db', ok: true, duration_ms: 1, count: MAX_OUTCOME_COUNT + 1 },
      ]),
      { ...BOUNDS, maxCalls: 100_000 },
    );
    expect(items.slice(0, 2)).toEqual([
      { ok: true, item: { resource: 'db', ok: false, durationMs: 7.5 } },
      { ok: true, item: { resource: 'db', key: 'k', ok: true, durationMs: 1, count: 3 } },
    ]);
    const refused = items.slice(2).map((d) => (d.ok ? undefined : [d.error.code, d.error.message]));
    expect(refused).toEqual([
      [ServerErrorCodes.INVALID_REQUEST, 'outcomes[2].resource: must be 1 to 128 characters'],
      [ServerErrorCodes.INVALID_REQUEST, 'outcomes[3].key: must be at most 16 characters'],
      [ServerErrorCodes.INVALID_REQUEST, `outcomes[4].duration_ms: must be between 0 and ${MAX_OUTCOME_DURATION_MS}`],
      [ServerErrorCodes.INVALID_REQUEST, `outcomes[5].duration_ms: must be between 0 and ${MAX_OUTCOME_DURATION_MS}`],
      [ServerErrorCodes.INVALID_REQUEST, `outcomes[6].count: must be at most ${MAX_OUTCOME_COUNT}`],
    ]);
  });

  it('refuses a report over the batch bound or standing for too many calls', () => {
    const one = { resource: 'db', ok: true, duration_ms: 1 };
    expect(refusal(encode(Array.from({ length: 9 }, () => one))).code).toBe(ServerErrorCodes.BATCH_TOO_LARGE);
    expect(refusal(encode([one, { ...one, count: 100 }])).code).toBe(ServerErrorCodes.BATCH_TOO_LARGE);
    expect(decodeOutcomes(encode([]), BOUNDS)).toEqual([]);
  });
});

describe('encodeOutcomeResults', () => {
  it('encodes what proto-loader encodes from the same answers: the same message once decoded', () => {
    const answer = fc.oneof(
      fc.constant({ recorded: true as const }),
      fc
        .record({
          code: fc.constantFrom(ServerErrorCodes.INVALID_REQUEST, ServerErrorCodes.BATCH_TOO_LARGE),
          message: fc.string({ unit: 'binary' }),
        })
        .map(({ code, message }): { error: Error } => ({ error: new ServerError(code, message) })),
      // Not a ServerError: answered as an internal error, its message kept to the log.
      fc.string().map((message) => ({ error: new Error(message) })),
    );
    fc.assert(
      fc.property(fc.array(answer, { maxLength: 6 }), (answers) => {
        const theirs = answers.map((a) =>
          'recorded' in a
            ? { recorded: true }
            : a.error instanceof ServerError
              ? { recorded: false, error_code: a.error.code, error_message: a.error.message }
              : { recorded: false, error_code: ServerErrorCodes.INTERNAL, error_message: 'internal error' },
        );
        const mine = method.responseDeserialize(encodeOutcomeResults(answers));
        expect(mine).toEqual(method.responseDeserialize(method.responseSerialize({ results: theirs })));
      }),
      { numRuns: 500 },
    );
  });
});
