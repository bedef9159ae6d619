import { MAX_COST } from '@sluice/core';
import type { EnvoyUnit } from '@sluice/rules';
import { MAX_OVERRIDE_REQUESTS_PER_UNIT, type RlsBounds } from '../bounds/bounds.js';
import { ServerError, ServerErrorCodes } from '../errors.js';
import type { RlsDescriptor, RlsRequest } from '../envoy/rls.js';
import { readRateLimitRequest, type RateLimitDescriptorMessage, type RateLimitRequestMessage } from './wire.js';

/** The units of an override by `envoy.type.v3.RateLimitUnit` number (0 is UNKNOWN, refused). */
const OVERRIDE_UNITS: readonly (EnvoyUnit | undefined)[] = [undefined, 'second', 'minute', 'hour', 'day', 'month', 'year'];
const UNIT_NAMES = ['SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR'];

function bad(field: string, message: string): ServerError {
  return new ServerError(ServerErrorCodes.INVALID_REQUEST, `${field}: ${message}`, { field });
}

function str(v: string, field: string, max: number, min = 0): string {
  if (v.length < min) throw bad(field, 'must not be empty');
  if (v.length > max) throw bad(field, `must be at most ${max} characters`);
  return v;
}

function bounded<T>(v: readonly T[], field: string, max: number): readonly T[] {
  if (v.length > max) throw bad(field, `at most ${max} allowed, got ${v.length}`);
  return v;
}

/** A uint64 hits addend, capped: larger than MAX_COST+1 is as good as infinite. */
function capped(v: bigint): number {
  return v > BigInt(MAX_COST + 1) ? MAX_COST + 1 : Number(v);
}

function descriptor(d: RateLimitDescriptorMessage, at: string, b: RlsBounds): RlsDescriptor {
  const entries = bounded(d.entries, `${at}.entries`, b.maxDescriptors).map((entry, j) => ({
    key: str(entry.key, `${at}.entries[${j}].key`, b.maxKeyLength, 1),
    value: str(entry.value, `${at}.entries[${j}].value`, b.maxKeyLength),
  }));
  if (entries.length === 0) throw bad(`${at}.entries`, 'must have at least one entry');
  let out: RlsDescriptor = { entries };
  if (d.limit !== undefined) {
    const unit = OVERRIDE_UNITS[d.limit.unit];
    if (unit === undefined) throw bad(`${at}.limit.unit`, `must be one of ${UNIT_NAMES.join(', ')}`);
    const rpu = d.limit.requestsPerUnit;
    if (rpu < 1) throw bad(`${at}.limit.requests_per_unit`, 'must be at least 1');
    out = { ...out, limit: { requestsPerUnit: Math.min(rpu, MAX_OVERRIDE_REQUESTS_PER_UNIT), unit } };
  }
  if (d.hitsAddend !== undefined) out = { ...out, hitsAddend: capped(d.hitsAddend) };
  return out;
}

/**
 * A read `RateLimitRequest` as an {@link RlsRequest}, enforcing what Envoy's validation
 * annotations state and the server's bounds. Throws `SLUICE_ERR_INVALID_REQUEST` naming the field.
 */
export function checkRlsRequest(r: RateLimitRequestMessage, b: RlsBounds): RlsRequest {
  const domain = str(r.domain, 'domain', b.maxKeyLength, 1);
  const descriptors = bounded(r.descriptors, 'descriptors', b.maxDescriptors).map((d, i) =>
    descriptor(d, `descriptors[${i}]`, b),
  );
  return { domain, descriptors, hitsAddend: Math.min(r.hitsAddend, MAX_COST + 1) };
}

/**
 * `RateLimitRequest` bytes as an {@link RlsRequest}: bytes that are not one are
 * `SLUICE_ERR_MALFORMED_BODY`; a string that is not UTF-8, or a field outside Envoy's rules or
 * the server's bounds, `SLUICE_ERR_INVALID_REQUEST` naming the field.
 */
export function decodeRlsRequest(bytes: Uint8Array, b: RlsBounds): RlsRequest {
  let read;
  try {
    read = readRateLimitRequest(bytes);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new ServerError(ServerErrorCodes.MALFORMED_BODY, `not a RateLimitRequest: ${why}`);
  }
  // Refused rather than decoded with U+FFFD: distinct strings would share one counter.
  const field = read.invalidUtf8;
  if (field !== undefined) throw new ServerError(ServerErrorCodes.INVALID_REQUEST, `${field}: must be valid UTF-8`, { field });
  return checkRlsRequest(read.request, b);
}
