import { ErrorCodes, isSluiceError, type Decision, type Limiter } from '@sluice/core';
import { matchDescriptors, type EnvoyUnit, type MatchedLimit, type RequestDescriptor } from '@sluice/rules';
import { ServerError, ServerErrorCodes } from '../errors.js';
import { limiterResourceName, type LiveRules } from '../live-rules.js';

/** One descriptor of a ShouldRateLimit request, decoded. */
export interface RlsDescriptor extends RequestDescriptor {
  /** The descriptor's own hits addend (zero included: check without counting). */
  readonly hitsAddend?: number;
}

/** A ShouldRateLimit request, decoded and bounded. */
export interface RlsRequest {
  readonly domain: string;
  readonly descriptors: readonly RlsDescriptor[];
  /** The request's hits addend; 0 means 1. */
  readonly hitsAddend: number;
}

export type RlsCode = 'OK' | 'OVER_LIMIT';

/** One descriptor's answer. */
export interface RlsStatus {
  readonly code: RlsCode;
  readonly currentLimit?: { readonly requestsPerUnit: number; readonly unit: EnvoyUnit; readonly name: string };
  readonly limitRemaining: number;
  readonly durationUntilResetMs?: number;
}

/** A ShouldRateLimit answer. */
export interface RlsResponse {
  readonly overallCode: RlsCode;
  readonly statuses: readonly RlsStatus[];
}

const MAX_UINT32 = 0xffff_ffff;

/** What the limit of one descriptor decided. */
interface Outcome {
  readonly match: MatchedLimit;
  /** The limiter's name of the match's resource. */
  readonly resource: string;
  readonly cost: number;
  readonly decision: Decision | undefined;
  /** The limit can never admit the cost. */
  readonly tooLarge: boolean;
}

function over(o: Outcome): boolean {
  return o.tooLarge || (o.decision !== undefined && !o.decision.allowed);
}

/**
 * Answers a ShouldRateLimit request as envoyproxy/ratelimit does (src/service/ratelimit.go):
 * each descriptor is matched in the request's domain (`replaces` drop the named limits;
 * unmatched descriptors are OK without a limit; unlimited ones OK with the largest remaining);
 * each matched limit is charged `hits_addend`; the answer is OVER_LIMIT when a descriptor is
 * over its limit, or when every `quota_mode` descriptor is. `shadow_mode` limits count but
 * answer OK. Unlike envoyproxy/ratelimit's default, a request answered OVER_LIMIT is charged
 * nowhere: the permits its admitted descriptors took are given back.
 */
export async function shouldRateLimit(request: RlsRequest, limiter: Limiter, rules: LiveRules): Promise<RlsResponse> {
  if (request.domain === '')
    throw new ServerError(ServerErrorCodes.INVALID_REQUEST, 'domain: must not be empty', { field: 'domain' });
  if (request.descriptors.length === 0) {
    throw new ServerError(ServerErrorCodes.INVALID_REQUEST, 'descriptors: must not be empty', { field: 'descriptors' });
  }
  // Own properties only: a domain named "constructor" or "__proto__" is just unknown.
  const domain = Object.hasOwn(rules.domains, request.domain) ? rules.domains[request.domain] : undefined;
  // An unknown domain has no limits: every descriptor passes, as in envoyproxy/ratelimit.
  if (domain === undefined)
    return { overallCode: 'OK', statuses: request.descriptors.map(() => ({ code: 'OK', limitRemaining: 0 })) };
  const matches = matchDescriptors(domain, request.descriptors);
  const requestHits = Math.max(1, request.hitsAddend);
  const outcomes = await Promise.all(
    matches.map(async (match, i): Promise<Outcome | undefined> => {
      if (match === undefined || match.unlimited || match.policy === undefined) return undefined;
      if (!rules.has(match.resource) && !rules.ensureOverride(match.resource, { limits: [match.policy] })) {
        throw new ServerError(ServerErrorCodes.TOO_MANY_OVERRIDES, 'too many distinct limit overrides; use configured limits');
      }
      const cost = request.descriptors[i]!.hitsAddend ?? requestHits;
      const resource = limiterResourceName(match.resource);
      try {
        return { match, resource, cost, decision: await limiter.try(resource, { key: match.key, cost }), tooLarge: false };
      } catch (err) {
        // A cost the limit can never admit is over that limit, as envoy counts it.
        if (isSluiceError(err, ErrorCodes.COST_EXCEEDS_LIMIT) || isSluiceError(err, ErrorCodes.INVALID_COST)) {
          return { match, resource, cost, decision: undefined, tooLarge: true };
        }
        throw err;
      }
    }),
  );
  let failedRate = 0;
  let failedQuota = 0;
  let quotas = 0;
  for (const o of outcomes) {
    if (o === undefined) continue;
    if (o.match.quota) {
      quotas++;
      if (over(o)) failedQuota++;
    } else if (over(o)) {
      failedRate++;
    }
  }
  const overallCode: RlsCode = failedRate > 0 || (quotas > 0 && quotas === failedQuota) ? 'OVER_LIMIT' : 'OK';
  if (overallCode === 'OVER_LIMIT') await giveBack(limiter, outcomes);
  const statuses = matches.map((match, i): RlsStatus => {
    const o = outcomes[i];
    if (match?.unlimited) return { code: 'OK', limitRemaining: MAX_UINT32 };
    if (o === undefined) return { code: 'OK', limitRemaining: 0 };
    return status(o);
  });
  return { overallCode, statuses };
}

function status(o: Outcome): RlsStatus {
  const { match, decision } = o;
  const currentLimit = { requestsPerUnit: match.requestsPerUnit!, unit: match.unit!, name: match.name ?? '' };
  const resetMs = decision === undefined ? undefined : Math.max(decision.resetAfterMs, decision.retryAfterMs);
  const base = { currentLimit, ...(resetMs === undefined ? {} : { durationUntilResetMs: resetMs }) };
  if (over(o)) return { ...base, code: 'OVER_LIMIT', limitRemaining: 0 };
  // Shadow mode: over the limit, counted, but answered OK with nothing left.
  if (decision!.shadow !== undefined) return { ...base, code: 'OK', limitRemaining: 0 };
  return { ...base, code: 'OK', limitRemaining: Math.min(MAX_UINT32, Math.max(0, Math.floor(decision!.remaining))) };
}

/** Returns what the admitted descriptors of a refused request took. */
async function giveBack(limiter: Limiter, outcomes: readonly (Outcome | undefined)[]): Promise<void> {
  await Promise.all(
    outcomes.map(async (o) => {
      if (o === undefined || o.cost === 0 || o.decision === undefined) return;
      if (!o.decision.allowed || o.decision.shadow !== undefined) return;
      await limiter.adjust(o.resource, { key: o.match.key, delta: -o.cost });
    }),
  );
}
