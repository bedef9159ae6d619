import { ServerError, ServerErrorCodes, describeError } from '../errors.js';
import { MAX_OUTCOME_COUNT, MAX_OUTCOME_DURATION_MS, checkOutcomeCalls, type OutcomesBounds } from '../bounds/bounds.js';
import type { OutcomeItem } from '../service/service.js';
import { DELIMITED, FIXED64, Reader, VARINT, WireError, Writer } from './protobuf.js';

/** `sluice.v1.Outcome` (proto/sluice/v1/outcomes.proto), fields at their proto3 defaults when absent. */
export interface OutcomeMessage {
  readonly resource: string;
  readonly key: string;
  readonly ok: boolean;
  readonly durationMs: number;
  readonly count: number;
}

/** Wire types of the known fields: the request's outcomes (1) are messages. */
const REPORT_FIELDS = (f: number) => (f === 1 ? DELIMITED : undefined);
/** resource (1) and key (2) strings, ok (3) a bool, duration_ms (4) a double, count (5) a uint32. */
const OUTCOME_FIELDS = (f: number) =>
  f === 1 || f === 2 ? DELIMITED : f === 3 || f === 5 ? VARINT : f === 4 ? FIXED64 : undefined;

function outcome(r: Reader, end: number, at: string): OutcomeMessage {
  let resource = '';
  let key = '';
  let ok = false;
  let durationMs = 0;
  let count = 0;
  while (r.pos < end) {
    const f = r.field(end, OUTCOME_FIELDS);
    if (f === 1) resource = r.string(end, `${at}.resource`);
    else if (f === 2) key = r.string(end, `${at}.key`);
    else if (f === 3) ok = r.bool(end);
    else if (f === 4) durationMs = r.double(end);
    else if (f === 5) count = r.varint32(end);
  }
  return { resource, key, ok, durationMs, count };
}

/**
 * Reads `ReportOutcomesRequest` bytes into its outcomes, strictly (see ./protobuf.ts); throws a
 * `WireError` for bytes that are not one, and for a string that is not valid UTF-8 (strings
 * that differ only in invalid bytes would otherwise name the same resource or key).
 */
export function readReportOutcomesRequest(bytes: Uint8Array): OutcomeMessage[] {
  const r = new Reader(bytes);
  const end = bytes.length;
  const outcomes: OutcomeMessage[] = [];
  while (r.pos < end) {
    if (r.field(end, REPORT_FIELDS) === 1) outcomes.push(outcome(r, r.delimited(end), `outcomes[${outcomes.length}]`));
  }
  if (r.invalidUtf8 !== undefined) throw new WireError(`${r.invalidUtf8} is not valid UTF-8`);
  return outcomes;
}

/** One item of a decoded report: the outcome, or why it is refused. */
export type DecodedOutcome =
  { readonly ok: true; readonly item: OutcomeItem } | { readonly ok: false; readonly error: ServerError };

/**
 * A `ReportOutcomesRequest` decoded and checked item by item (as `POST /v1/outcomes` checks
 * them); a message that is not one, holds more than `maxBatch` outcomes or stands for more than
 * `maxCalls` calls, throws a ServerError.
 */
export function decodeOutcomes(bytes: Buffer, b: OutcomesBounds): DecodedOutcome[] {
  let outcomes: OutcomeMessage[];
  try {
    outcomes = readReportOutcomesRequest(bytes);
  } catch (err) {
    throw new ServerError(
      ServerErrorCodes.MALFORMED_BODY,
      `not a ReportOutcomesRequest: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  if (outcomes.length > b.maxBatch) {
    throw new ServerError(ServerErrorCodes.BATCH_TOO_LARGE, `at most ${b.maxBatch} outcomes per report, got ${outcomes.length}`);
  }
  const decoded = outcomes.map((o, i): DecodedOutcome => {
    const bad = (field: string, message: string): DecodedOutcome => ({
      ok: false,
      error: new ServerError(ServerErrorCodes.INVALID_REQUEST, `outcomes[${i}].${field}: ${message}`, {
        field: `outcomes[${i}].${field}`,
      }),
    });
    if (o.resource.length === 0 || o.resource.length > 128) return bad('resource', 'must be 1 to 128 characters');
    if (o.key.length > b.maxKeyLength) return bad('key', `must be at most ${b.maxKeyLength} characters`);
    if (!Number.isFinite(o.durationMs) || o.durationMs < 0 || o.durationMs > MAX_OUTCOME_DURATION_MS) {
      return bad('duration_ms', `must be between 0 and ${MAX_OUTCOME_DURATION_MS}`);
    }
    if (o.count > MAX_OUTCOME_COUNT) return bad('count', `must be at most ${MAX_OUTCOME_COUNT}`);
    return {
      ok: true,
      item: {
        resource: o.resource,
        ...(o.key === '' ? {} : { key: o.key }),
        ok: o.ok,
        durationMs: o.durationMs,
        ...(o.count === 0 ? {} : { count: o.count }),
      },
    };
  });
  checkOutcomeCalls(
    decoded.map((d) => (d.ok ? d.item : undefined)),
    b.maxCalls,
  );
  return decoded;
}

/** A `ReportOutcomesResponse`: each item's answer (recorded, or its error's code and message). */
export function encodeOutcomeResults(results: readonly ({ recorded: true } | { error: unknown })[]): Buffer {
  const w = new Writer();
  for (const r of results) {
    const result = new Writer();
    if ('recorded' in r) {
      result.bool(1, true);
    } else {
      const { body } = describeError(r.error);
      result.string(2, body.code).string(3, body.message);
    }
    w.message(1, result);
  }
  return w.done();
}
