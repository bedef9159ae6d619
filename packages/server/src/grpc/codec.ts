import { MAX_COST, POLICY_BOUNDS } from '@sluice/core';
import type { EnvoyUnit } from '@sluice/rules';
import { ServerError, ServerErrorCodes } from '../errors.js';
import type { RlsDescriptor, RlsRequest, RlsResponse } from '../envoy/rls.js';

/** Bounds on a decoded request. */
export interface RlsBounds {
  /** Most descriptors per request, and most entries per descriptor. */
  readonly maxDescriptors: number;
  /** Longest key or value of an entry, and longest domain. */
  readonly maxKeyLength: number;
}

/**
 * The largest `requests_per_unit` of an override: the most a fixed window counts. Larger ones
 * (up to uint32's 4294967295) are capped to it, not refused: a limit that large admits as much.
 */
export const MAX_OVERRIDE_REQUESTS_PER_UNIT = POLICY_BOUNDS.maxLimit;

/** The wire units of an override (envoy.type.v3.RateLimitUnit). */
const OVERRIDE_UNITS: Readonly<Record<string, EnvoyUnit>> = {
  SECOND: 'second',
  MINUTE: 'minute',
  HOUR: 'hour',
  DAY: 'day',
  MONTH: 'month',
  YEAR: 'year',
};

function bad(field: string, message: string): ServerError {
  return new ServerError(ServerErrorCodes.INVALID_REQUEST, `${field}: ${message}`, { field });
}

function str(v: unknown, field: string, max: number, min = 0): string {
  if (typeof v !== 'string') throw bad(field, 'must be a string');
  if (v.length < min) throw bad(field, 'must not be empty');
  if (v.length > max) throw bad(field, `must be at most ${max} characters`);
  return v;
}

function list(v: unknown, field: string, max: number): unknown[] {
  if (!Array.isArray(v)) throw bad(field, 'must be a list');
  if (v.length > max) throw bad(field, `at most ${max} allowed, got ${v.length}`);
  return v;
}

function obj(v: unknown, field: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad(field, 'must be a message');
  return v as Record<string, unknown>;
}

/** A uint64 as proto-loader hands it (a decimal string), capped: larger than MAX_COST+1 is as good as infinite. */
function uint64(v: unknown, field: string): number {
  const s = typeof v === 'number' ? String(v) : v;
  if (typeof s !== 'string' || !/^\d+$/.test(s)) throw bad(field, 'must be an unsigned integer');
  return s.length > 12 ? MAX_COST + 1 : Math.min(Number(s), MAX_COST + 1);
}

function descriptor(raw: unknown, at: string, b: RlsBounds): RlsDescriptor {
  const d = obj(raw, at);
  const entries = list(d.entries, `${at}.entries`, b.maxDescriptors).map((e, j) => {
    const entry = obj(e, `${at}.entries[${j}]`);
    return {
      key: str(entry.key, `${at}.entries[${j}].key`, b.maxKeyLength, 1),
      value: str(entry.value, `${at}.entries[${j}].value`, b.maxKeyLength),
    };
  });
  if (entries.length === 0) throw bad(`${at}.entries`, 'must have at least one entry');
  let out: RlsDescriptor = { entries };
  if (d.limit !== null && d.limit !== undefined) {
    const l = obj(d.limit, `${at}.limit`);
    const unit = typeof l.unit === 'string' ? OVERRIDE_UNITS[l.unit] : undefined;
    if (unit === undefined) throw bad(`${at}.limit.unit`, `must be one of ${Object.keys(OVERRIDE_UNITS).join(', ')}`);
    const rpu = l.requests_per_unit;
    if (typeof rpu !== 'number' || !Number.isInteger(rpu) || rpu < 1)
      throw bad(`${at}.limit.requests_per_unit`, 'must be at least 1');
    out = { ...out, limit: { requestsPerUnit: Math.min(rpu, MAX_OVERRIDE_REQUESTS_PER_UNIT), unit } };
  }
  if (d.hits_addend !== null && d.hits_addend !== undefined) {
    out = { ...out, hitsAddend: uint64(obj(d.hits_addend, `${at}.hits_addend`).value, `${at}.hits_addend`) };
  }
  return out;
}

/**
 * A `RateLimitRequest` as proto-loader decodes it (keepCase, longs and enums as strings) into
 * an {@link RlsRequest}, enforcing what Envoy's validation annotations state and the server's
 * bounds. Throws `SLUICE_ERR_INVALID_REQUEST` naming the field.
 */
export function decodeRlsRequest(raw: unknown, b: RlsBounds): RlsRequest {
  const r = obj(raw, 'request');
  const domain = str(r.domain, 'domain', b.maxKeyLength, 1);
  const descriptors = list(r.descriptors, 'descriptors', b.maxDescriptors).map((d, i) => descriptor(d, `descriptors[${i}]`, b));
  const hits = r.hits_addend;
  if (typeof hits !== 'number' || !Number.isInteger(hits) || hits < 0) throw bad('hits_addend', 'must be an unsigned integer');
  return { domain, descriptors, hitsAddend: Math.min(hits, MAX_COST + 1) };
}

/**
 * An {@link RlsResponse} as proto-loader encodes it. The server writes responses with
 * `writeRateLimitResponse` (./wire.ts) instead; this form is what its test compares it with.
 */
export function encodeRlsResponse(r: RlsResponse): Record<string, unknown> {
  return {
    overall_code: r.overallCode,
    statuses: r.statuses.map((s) => ({
      code: s.code,
      ...(s.currentLimit === undefined
        ? {}
        : {
            current_limit: {
              name: s.currentLimit.name,
              requests_per_unit: s.currentLimit.requestsPerUnit,
              unit: s.currentLimit.unit.toUpperCase(),
            },
          }),
      limit_remaining: s.limitRemaining,
      ...(s.durationUntilResetMs === undefined
        ? {}
        : {
            duration_until_reset: {
              seconds: Math.floor(s.durationUntilResetMs / 1000),
              nanos: Math.round((s.durationUntilResetMs % 1000) * 1e6),
            },
          }),
    })),
  };
}
