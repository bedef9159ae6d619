/* eslint-disable @typescript-eslint/no-explicit-any, @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-argument --
   responses are read as @grpc/proto-loader decodes them */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The server's vendored `.proto` files. */
const PROTO_DIR = join(resolve(dirname(fileURLToPath(import.meta.url)), '../../..'), 'packages/server/proto');

/** `StreamRateLimitQuotas` as @grpc/proto-loader loads it: field names as in the .proto, enums and 64-bit integers as strings. */
function loadRlqsMethod(): protoLoader.MethodDefinition<object, object> {
  const pkg = protoLoader.loadSync('envoy/service/rate_limit_quota/v3/rlqs.proto', {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
    includeDirs: [PROTO_DIR],
  });
  const service = pkg['envoy.service.rate_limit_quota.v3.RateLimitQuotaService'] as protoLoader.ServiceDefinition;
  return service.StreamRateLimitQuotas!;
}

/**
 * A data plane of Envoy's rate limit quota service for the tests and the bench, built from the vendored protos
 * with @grpc/proto-loader and @grpc/grpc-js (independent of the server's own decoding). It
 * behaves as Envoy's `rate_limit_quota` filter documents: the first request in a bucket
 * subscribes (an immediate report), then a report every `reportingIntervalMs`; requests are
 * decided locally by the bucket's active assignment (a token bucket, requests per time unit, or
 * a blanket rule); with no assignment, or an expired one, the configured fallback applies
 * (`no_assignment_behavior`, `expired_assignment_behavior`: here allow all or deny all). An
 * assignment with the same strategy as the active one extends it; another replaces it (its
 * bucket starts full). An abandon forgets the bucket.
 */

/** What a bucket does with no (or an expired) assignment. */
export type Fallback = 'allow' | 'deny';

interface Local {
  readonly strategy: any;
  readonly key: string;
  expiresAt: number;
  tokens: number;
  lastFill: number;
  /** requests_per_time_unit: the current unit's start and its count. */
  unitStart: number;
  unitCount: number;
}

const UNIT_MS: Record<string, number> = { SECOND: 1000, MINUTE: 60_000, HOUR: 3_600_000, DAY: 86_400_000 };
const durationMs = (d: any): number => Number(d?.seconds ?? 0) * 1000 + Number(d?.nanos ?? 0) / 1e6;

/** One bucket of a simulated Envoy. */
export class SimBucket {
  allowedSince = 0;
  deniedSince = 0;
  /** Every admission's time (ms). */
  readonly admitted: number[] = [];
  /** Denials by cause: no assignment yet, an expired one, or the assignment's bucket empty. */
  readonly denied = { none: 0, expired: 0, empty: 0 };
  subscribed = false;
  lastReport = 0;
  local: Local | undefined;
  /** Assignments received, and abandons. */
  assignments = 0;
  abandons = 0;

  constructor(
    readonly id: number,
    readonly bucket: Record<string, string>,
    readonly fallback: { noAssignment: Fallback; expired: Fallback },
  ) {}

  /** Decides one request at `now` locally. */
  decide(now: number): boolean {
    const ok = this.#decide(now);
    if (ok) {
      this.allowedSince++;
      this.admitted.push(now);
    } else this.deniedSince++;
    return ok;
  }

  #decide(now: number): boolean {
    const l = this.local;
    if (l === undefined) return this.fallback.noAssignment === 'allow' || this.#deny('none');
    if (now >= l.expiresAt) return this.fallback.expired === 'allow' || this.#deny('expired');
    const s = l.strategy;
    if (s.strategy === 'blanket_rule') return s.blanket_rule !== 'DENY_ALL' || this.#deny('empty');
    if (s.strategy === 'token_bucket') {
      const tb = s.token_bucket;
      const interval = durationMs(tb.fill_interval);
      const perFill = tb.tokens_per_fill === null ? 1 : Number(tb.tokens_per_fill.value);
      const fills = Math.floor((now - l.lastFill) / interval);
      if (fills > 0) {
        l.tokens = Math.min(Number(tb.max_tokens), l.tokens + fills * perFill);
        l.lastFill += fills * interval;
      }
      if (l.tokens < 1) return this.#deny('empty');
      l.tokens--;
      return true;
    }
    const rpu = s.requests_per_time_unit;
    const n = Number(rpu.requests_per_time_unit);
    if (n === 0) return this.#deny('empty');
    const unit = UNIT_MS[rpu.time_unit] ?? 1000;
    if (now - l.unitStart >= unit) {
      l.unitStart = now;
      l.unitCount = 0;
    }
    if (l.unitCount >= n) return this.#deny('empty');
    l.unitCount++;
    return true;
  }

  #deny(cause: keyof SimBucket['denied']): false {
    this.denied[cause]++;
    return false;
  }

  /** Applies a `BucketAction` at `now`. */
  apply(action: any, now: number): void {
    if (action.bucket_action === 'abandon_action') {
      this.abandons++;
      this.local = undefined;
      this.subscribed = false;
      return;
    }
    this.assignments++;
    const a = action.quota_assignment_action;
    const strategy = a.rate_limit_strategy ?? { strategy: 'blanket_rule', blanket_rule: 'ALLOW_ALL' };
    const key = JSON.stringify(strategy);
    const ttl = a.assignment_time_to_live === null ? Infinity : durationMs(a.assignment_time_to_live);
    const l = this.local;
    if (l !== undefined && l.key === key && now < l.expiresAt) {
      l.expiresAt = now + ttl;
      return;
    }
    this.local = {
      strategy,
      key,
      expiresAt: now + ttl,
      tokens: strategy.strategy === 'token_bucket' ? Number(strategy.token_bucket.max_tokens) : 0,
      lastFill: now,
      unitStart: now,
      unitCount: 0,
    };
  }
}

/** A simulated Envoy: one RLQS stream, its buckets. */
export class SimEnvoy {
  readonly #client: grpc.Client;
  readonly #call: grpc.ClientDuplexStream<Buffer, any>;
  readonly buckets = new Map<number, SimBucket>();
  /** The stream's status once it ended. */
  readonly ended: Promise<{ code: number; details: string; sluice: string | undefined }>;
  readonly responses: any[] = [];
  #sentDomain = false;

  constructor(
    target: string,
    readonly domain: string,
    authorization?: string,
  ) {
    const method = loadRlqsMethod();
    // A connection of its own, as each Envoy has (grpc-js would otherwise share one among the
    // clients of a target, and the server bounds quota streams per connection).
    this.#client = new grpc.Client(target, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
    const metadata = new grpc.Metadata();
    if (authorization !== undefined) metadata.set('authorization', authorization);
    this.#call = this.#client.makeBidiStreamRequest(
      method.path,
      (b: Buffer) => b,
      (b: Buffer) => method.responseDeserialize(b),
      metadata,
    );
    this.serialize = (m: object) => method.requestSerialize(m);
    this.#call.on('data', (response: any) => {
      this.responses.push(response);
      const now = Date.now();
      for (const action of response.bucket_action) {
        const b = [...this.buckets.values()].find((x) => sameBucket(x.bucket, action.bucket_id.bucket));
        b?.apply(action, now);
      }
    });
    this.ended = new Promise((resolve) => {
      this.#call.on('status', (s: grpc.StatusObject) =>
        resolve({ code: s.code, details: s.details, sluice: s.metadata.get('sluice-error-code')[0]?.toString() }),
      );
      this.#call.on('error', () => undefined);
    });
  }

  readonly serialize: (m: object) => Buffer;

  /** Adds a bucket (not yet subscribed: its first request does). */
  bucket(
    id: number,
    bucket: Record<string, string>,
    fallback = { noAssignment: 'deny' as Fallback, expired: 'deny' as Fallback },
  ) {
    const b = new SimBucket(id, bucket, fallback);
    this.buckets.set(id, b);
    return b;
  }

  /**
   * Takes over bucket `b` of another stream (as Envoy does when it reconnects): its assignment
   * stays in force until it expires, and its next request subscribes on this stream.
   */
  adopt(b: SimBucket): SimBucket {
    b.subscribed = false;
    this.buckets.set(b.id, b);
    return b;
  }

  /** One request in bucket `b` at `now`: the first subscribes with an immediate report. */
  request(b: SimBucket, now: number): boolean {
    const ok = b.decide(now);
    if (!b.subscribed) {
      b.subscribed = true;
      b.lastReport = now;
      this.report([b], now, 1);
    }
    return ok;
  }

  /** Reports the buckets due at `now` (their last report `intervalMs` ago or more). */
  tick(now: number, intervalMs: number): void {
    const due = [...this.buckets.values()].filter((b) => b.subscribed && now - b.lastReport >= intervalMs);
    if (due.length > 0) this.report(due, now);
  }

  report(buckets: SimBucket[], now: number, elapsedFloorMs = 0): void {
    const usages: Record<string, object> = {};
    for (const b of buckets) {
      const elapsed = Math.max(elapsedFloorMs, now - b.lastReport, 1);
      usages[String(b.id)] = {
        bucket_id: { bucket: b.bucket },
        time_elapsed: { seconds: Math.floor(elapsed / 1000), nanos: (elapsed % 1000) * 1e6 },
        num_requests_allowed: b.allowedSince,
        num_requests_denied: b.deniedSince,
      };
      b.allowedSince = 0;
      b.deniedSince = 0;
      b.lastReport = now;
    }
    this.send({ ...(this.#sentDomain ? {} : { domain: this.domain }), bucket_quota_usages: usages });
    this.#sentDomain = true;
  }

  /** Sends one message. */
  send(message: object): void {
    this.writeRaw(this.serialize(message));
  }

  /** Sends bytes as they are, as one message. */
  writeRaw(bytes: Buffer): void {
    this.#call.write(bytes);
  }

  /** Ends the Envoy's side of the stream. */
  end(): void {
    this.#call.end();
  }

  close(): void {
    this.#call.cancel();
    this.#client.close();
  }
}

/** The most admissions of `times` (ms, sorted) in any window of `windowMs`. */
export function mostInWindow(times: readonly number[], windowMs: number): number {
  let most = 0;
  let from = 0;
  for (let to = 0; to < times.length; to++) {
    while (times[to]! - times[from]! >= windowMs) from++;
    most = Math.max(most, to - from + 1);
  }
  return most;
}

function sameBucket(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => a[k] === b[k]);
}
