import type { MethodDefinition } from '@grpc/proto-loader';
import { describeError } from '../errors.js';
import { ServerError, ServerErrorCodes } from '../errors.js';
import { MAX_OUTCOME_COUNT, MAX_OUTCOME_DURATION_MS, checkOutcomeCalls, type OutcomesBounds } from '../bounds/bounds.js';
import type { OutcomeItem } from '../service/service.js';
import { loadOutcomesDefinition } from './proto.js';

let method: MethodDefinition<{ outcomes?: RawOutcome[] }, object> | undefined;
function reportMethod(): MethodDefinition<{ outcomes?: RawOutcome[] }, object> {
  method ??= loadOutcomesDefinition().Report as MethodDefinition<{ outcomes?: RawOutcome[] }, object>;
  return method;
}

interface RawOutcome {
  readonly resource: string;
  readonly key: string;
  readonly ok: boolean;
  readonly duration_ms: number;
  readonly count: number;
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
  let raw: { outcomes?: RawOutcome[] };
  try {
    raw = reportMethod().requestDeserialize(bytes);
  } catch (err) {
    throw new ServerError(
      ServerErrorCodes.MALFORMED_BODY,
      `not a ReportOutcomesRequest: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  const outcomes = raw.outcomes ?? [];
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
    if (!Number.isFinite(o.duration_ms) || o.duration_ms < 0 || o.duration_ms > MAX_OUTCOME_DURATION_MS) {
      return bad('duration_ms', `must be between 0 and ${MAX_OUTCOME_DURATION_MS}`);
    }
    if (o.count > MAX_OUTCOME_COUNT) return bad('count', `must be at most ${MAX_OUTCOME_COUNT}`);
    return {
      ok: true,
      item: {
        resource: o.resource,
        ...(o.key === '' ? {} : { key: o.key }),
        ok: o.ok,
        durationMs: o.duration_ms,
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
  const encoded = results.map((r) => {
    if ('recorded' in r) return { recorded: true, error_code: '', error_message: '' };
    const { body } = describeError(r.error);
    return { recorded: false, error_code: body.code, error_message: body.message };
  });
  return reportMethod().responseSerialize({ results: encoded });
}
