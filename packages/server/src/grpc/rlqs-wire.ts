import type { BucketAction, BucketUsage } from '../quota/quota-service.js';
import { MAX_REPORTED_REQUESTS } from '../quota/quota-service.js';
import { ServerError, ServerErrorCodes } from '../errors.js';
import { DELIMITED, Reader, VARINT, WireError, Writer } from './protobuf.js';

/**
 * Envoy's rate limit quota service messages (proto/envoy/service/rate_limit_quota/v3/rlqs.proto)
 * in protobuf's encoding, read and written with ./protobuf.ts: usage reports in (strictly, see
 * ./protobuf.ts), bucket actions out. Maps are read as protobuf reads them: a repeated key keeps
 * its last value.
 */

/** `RateLimitQuotaUsageReports.BucketQuotaUsage`, fields at their proto3 defaults when absent. */
export interface BucketQuotaUsageMessage {
  readonly bucket: ReadonlyMap<string, string> | undefined;
  /** `time_elapsed` as [seconds, nanos]; undefined when absent. */
  readonly timeElapsed: readonly [bigint, number] | undefined;
  readonly allowed: bigint;
  readonly denied: bigint;
}

/** `RateLimitQuotaUsageReports`. */
export interface UsageReportsMessage {
  readonly domain: string;
  /** The usages by the map's keys, in the order first seen. */
  readonly usages: ReadonlyMap<bigint, BucketQuotaUsageMessage>;
}

const DELIMITED_1_2 = (f: number) => (f === 1 || f === 2 ? DELIMITED : undefined);
const MAP_ENTRY_U64 = (f: number) => (f === 1 ? VARINT : f === 2 ? DELIMITED : undefined);
const USAGE_FIELDS = (f: number) => (f === 1 || f === 2 || f === 5 ? DELIMITED : f === 3 || f === 4 ? VARINT : undefined);
const BUCKET_ID_FIELDS = (f: number) => (f === 1 ? DELIMITED : undefined);
const VARINT_1_2 = (f: number) => (f === 1 || f === 2 ? VARINT : undefined);

function bucketId(r: Reader, end: number, at: string): Map<string, string> {
  const pairs = new Map<string, string>();
  while (r.pos < end) {
    if (r.field(end, BUCKET_ID_FIELDS) !== 1) continue;
    const stop = r.delimited(end);
    let key = '';
    let value = '';
    while (r.pos < stop) {
      const f = r.field(stop, DELIMITED_1_2);
      if (f === 1) key = r.string(stop, `${at}.bucket.key`);
      else if (f === 2) value = r.string(stop, `${at}.bucket[${JSON.stringify(key)}]`);
    }
    pairs.set(key, value);
  }
  return pairs;
}

function duration(r: Reader, end: number): [bigint, number] {
  let seconds = 0n;
  let nanos = 0;
  while (r.pos < end) {
    const f = r.field(end, VARINT_1_2);
    if (f === 1) seconds = BigInt.asIntN(64, r.uint64(end));
    else if (f === 2) nanos = r.varint32(end) | 0;
  }
  return [seconds, nanos];
}

function usage(r: Reader, end: number, at: string): BucketQuotaUsageMessage {
  let bucket: Map<string, string> | undefined;
  let timeElapsed: [bigint, number] | undefined;
  let allowed = 0n;
  let denied = 0n;
  while (r.pos < end) {
    const f = r.field(end, USAGE_FIELDS);
    if (f === 1) {
      const stop = r.delimited(end);
      const read = bucketId(r, stop, `${at}.bucket_id`);
      // A repeated message field merges, as protobuf does.
      bucket = bucket === undefined ? read : new Map([...bucket, ...read]);
    } else if (f === 2) timeElapsed = duration(r, r.delimited(end));
    else if (f === 3) allowed = r.uint64(end);
    else if (f === 4) denied = r.uint64(end);
    else if (f === 5) r.pos = r.delimited(end);
  }
  return { bucket, timeElapsed, allowed, denied };
}

/** Reads `RateLimitQuotaUsageReports` bytes; throws a `WireError` for bytes that are not one (or a string not UTF-8). */
export function readUsageReports(bytes: Uint8Array): UsageReportsMessage {
  const r = new Reader(bytes);
  const end = bytes.length;
  let domain = '';
  const usages = new Map<bigint, BucketQuotaUsageMessage>();
  while (r.pos < end) {
    const f = r.field(end, DELIMITED_1_2);
    if (f === 1) domain = r.string(end, 'domain');
    else if (f === 2) {
      const stop = r.delimited(end);
      let key = 0n;
      let value: BucketQuotaUsageMessage = { bucket: undefined, timeElapsed: undefined, allowed: 0n, denied: 0n };
      while (r.pos < stop) {
        const g = r.field(stop, MAP_ENTRY_U64);
        if (g === 1) key = r.uint64(stop);
        else if (g === 2) value = usage(r, r.delimited(stop), `bucket_quota_usages[${usages.size}]`);
      }
      usages.set(key, value);
    }
  }
  if (r.invalidUtf8 !== undefined) throw new WireError(`${r.invalidUtf8} is not valid UTF-8`);
  return { domain, usages };
}

/** What a usage report may carry. */
export interface ReportBounds {
  /** Most buckets in one report. */
  readonly maxBuckets: number;
  /** Most pairs of a bucket id. */
  readonly maxPairs: number;
  /** Longest domain, and longest key or value of a bucket id. */
  readonly maxKeyLength: number;
}

/** Longest `time_elapsed` taken: an hour (a reporting interval is seconds). */
export const MAX_ELAPSED_MS = 3_600_000;

function invalid(field: string, message: string): ServerError {
  return new ServerError(ServerErrorCodes.INVALID_REQUEST, `${field}: ${message}`, { field });
}

/**
 * A usage report decoded and checked as Envoy's validation rules state (a bucket id of at least
 * one pair, no empty key or value; `time_elapsed` present and above 0) and within the bounds.
 * Bytes that are not a report are `SLUICE_ERR_MALFORMED_BODY`; a field outside the rules
 * `SLUICE_ERR_INVALID_REQUEST` naming it; more buckets than the bound `SLUICE_ERR_BATCH_TOO_LARGE`.
 */
export function decodeUsageReports(bytes: Uint8Array, b: ReportBounds): { domain: string; usages: BucketUsage[] } {
  let read: UsageReportsMessage;
  try {
    read = readUsageReports(bytes);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new ServerError(ServerErrorCodes.MALFORMED_BODY, `not a RateLimitQuotaUsageReports: ${why}`);
  }
  if (read.domain.length > b.maxKeyLength) throw invalid('domain', `must be at most ${b.maxKeyLength} characters`);
  if (read.usages.size > b.maxBuckets) {
    throw new ServerError(
      ServerErrorCodes.BATCH_TOO_LARGE,
      `at most ${b.maxBuckets} buckets per report, got ${read.usages.size}`,
    );
  }
  const usages: BucketUsage[] = [];
  for (const [id, u] of read.usages) {
    const at = `bucket_quota_usages[${id}]`;
    if (u.bucket === undefined || u.bucket.size === 0) throw invalid(`${at}.bucket_id`, 'must have at least one pair');
    if (u.bucket.size > b.maxPairs) throw invalid(`${at}.bucket_id`, `must have at most ${b.maxPairs} pairs`);
    const bucket: Record<string, string> = {};
    for (const [k, v] of u.bucket) {
      if (k.length === 0 || v.length === 0) throw invalid(`${at}.bucket_id`, 'keys and values must not be empty');
      if (k.length > b.maxKeyLength || v.length > b.maxKeyLength) {
        throw invalid(`${at}.bucket_id`, `keys and values must be at most ${b.maxKeyLength} characters`);
      }
      Object.defineProperty(bucket, k, { value: v, enumerable: true });
    }
    if (u.timeElapsed === undefined) throw invalid(`${at}.time_elapsed`, 'is required');
    const [seconds, nanos] = u.timeElapsed;
    const elapsedMs = Number(seconds) * 1000 + nanos / 1e6;
    if (!(elapsedMs > 0) || nanos < 0 || nanos > 999_999_999) throw invalid(`${at}.time_elapsed`, 'must be above 0');
    if (elapsedMs > MAX_ELAPSED_MS) throw invalid(`${at}.time_elapsed`, `must be at most ${MAX_ELAPSED_MS / 1000} s`);
    if (u.allowed > BigInt(MAX_REPORTED_REQUESTS))
      throw invalid(`${at}.num_requests_allowed`, `must be at most ${MAX_REPORTED_REQUESTS}`);
    if (u.denied > BigInt(MAX_REPORTED_REQUESTS))
      throw invalid(`${at}.num_requests_denied`, `must be at most ${MAX_REPORTED_REQUESTS}`);
    usages.push({ bucket: Object.freeze(bucket), elapsedMs, allowed: Number(u.allowed), denied: Number(u.denied) });
  }
  return { domain: read.domain, usages };
}

function writeBucketId(bucket: Readonly<Record<string, string>>): Writer {
  const w = new Writer();
  for (const k of Object.keys(bucket)) w.message(1, new Writer().string(1, k).string(2, bucket[k]!));
  return w;
}

function writeDuration(ms: number): Writer {
  const seconds = Math.floor(ms / 1000);
  return new Writer().uint(1, seconds).uint(2, Math.round((ms - seconds * 1000) * 1e6));
}

/** A `RateLimitQuotaResponse` of the actions, in order. */
export function writeQuotaResponse(actions: readonly BucketAction[]): Buffer {
  const w = new Writer();
  for (const a of actions) {
    const action = new Writer().message(1, writeBucketId(a.bucket));
    if (a.kind === 'abandon') {
      action.message(3, new Writer());
    } else {
      const strategy = new Writer();
      const s = a.strategy;
      if (s.kind === 'deny-all') strategy.tag(1, VARINT).varint(1);
      else {
        strategy.message(
          3,
          new Writer()
            .uint(1, s.maxTokens)
            .message(2, new Writer().uint(1, s.tokensPerFill))
            .message(3, writeDuration(s.fillIntervalMs)),
        );
      }
      action.message(2, new Writer().message(2, writeDuration(a.ttlMs)).message(3, strategy));
    }
    w.message(1, action);
  }
  return w.done();
}
