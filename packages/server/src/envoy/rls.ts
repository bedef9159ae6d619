import { ErrorCodes, isSluiceError, type Decision, type Limiter } from '@sluice/core';
import {
  OVERRIDE_RESOURCE_PREFIX,
  matchDescriptors,
  type EnvoyDomain,
  type EnvoyUnit,
  type MatchedLimit,
  type RequestDescriptor,
} from '@sluice/rules';
import { ServerError, ServerErrorCodes } from '../errors.js';
import { limiterResourceName, type LiveRules } from '../live-rules.js';
import type { DomainSplit } from '../service/routing.js';
import type { OverrideTable } from './overrides.js';

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
  /** The limiter's name of the match's resource (the candidate's, for a descriptor on it). */
  readonly resource: string;
  readonly cost: number;
  readonly decision: Decision | undefined;
  /** Over without a decision: the limit can never admit the cost, or cannot be counted. */
  readonly refused: boolean;
}

function over(o: Outcome): boolean {
  return o.refused || (o.decision !== undefined && !o.decision.allowed);
}

/** The limits of a request's descriptors, their limiter names, and which are overrides the server cannot count. */
interface Matched {
  readonly matches: readonly (MatchedLimit | undefined)[];
  readonly untracked: ReadonlySet<number>;
}

/**
 * Matches the descriptors and holds each limit override in `overrides` (`held` collects the
 * releases). A descriptor whose override the table does not admit is decided as if it carried
 * none, by the limit configured for its entries; with no such limit it cannot be counted, and
 * is answered over its override rather than let through unlimited.
 */
function matchLimits(
  domain: EnvoyDomain,
  descriptors: readonly RlsDescriptor[],
  overrides: OverrideTable,
  held: (() => void)[],
): Matched {
  const matches = matchDescriptors(domain, descriptors);
  const refused = new Set<number>();
  matches.forEach((m, i) => {
    if (m?.policy === undefined || !m.resource.startsWith(OVERRIDE_RESOURCE_PREFIX)) return;
    const release = overrides.hold(limiterResourceName(m.resource), { limits: [m.policy] });
    if (release === undefined) refused.add(i);
    else held.push(release);
  });
  if (refused.size === 0) return { matches, untracked: refused };
  // Matched again as a whole: a configured limit found instead may replace, or be replaced by, others.
  const rematched = matchDescriptors(
    domain,
    descriptors.map((d, i) => (refused.has(i) ? { entries: d.entries } : d)),
  );
  const untracked = new Set([...refused].filter((i) => domain.match(descriptors[i]!.entries) === undefined));
  return { matches: rematched.map((m, i) => (untracked.has(i) ? matches[i] : m)), untracked };
}

/**
 * The key a descriptor is placed in a rollout cohort by: its entries, in order. The same
 * entries land on the same side on every server, whatever else the request carries.
 */
export function descriptorCohortKey(entries: readonly { readonly key: string; readonly value: string }[]): string {
  return JSON.stringify(entries.map((e) => [e.key, e.value]));
}

/** A share of a request's descriptors decided by one version of its domain. */
interface Side {
  /** The version's domain (undefined: the version has no such domain, so no limits). */
  readonly domain: EnvoyDomain | undefined;
  /** The descriptors' places in the request. */
  readonly places: readonly number[];
  /** The limiter's name of a rule resource of this version. */
  readonly nameOf: (resource: string) => string;
}

/** One request's descriptors matched on every side, in request order. */
interface Placed {
  readonly matches: (MatchedLimit | undefined)[];
  readonly names: (string | undefined)[];
  readonly untracked: Set<number>;
}

function place(request: RlsRequest, sides: readonly Side[], overrides: OverrideTable, held: (() => void)[]): Placed {
  const n = request.descriptors.length;
  const out: Placed = {
    matches: Array.from({ length: n }, () => undefined),
    names: Array.from({ length: n }, () => undefined),
    untracked: new Set(),
  };
  for (const side of sides) {
    if (side.domain === undefined || side.places.length === 0) continue;
    const { matches, untracked } = matchLimits(
      side.domain,
      side.places.map((i) => request.descriptors[i]!),
      overrides,
      held,
    );
    side.places.forEach((place, j) => {
      const m = matches[j];
      out.matches[place] = m;
      out.names[place] = m === undefined ? undefined : side.nameOf(m.resource);
      if (untracked.has(j)) out.untracked.add(place);
    });
  }
  return out;
}

/**
 * The sides of a request: the whole of it on the domain in force, or, while a rollout splits
 * the domain, each descriptor on its cohort's version. `replaces` then act within a side.
 */
function sidesOf(
  request: RlsRequest,
  domain: EnvoyDomain | undefined,
  split: DomainSplit | undefined,
): { sides: Side[]; keys?: string[] } {
  const all = request.descriptors.map((_, i) => i);
  if (split === undefined) return { sides: [{ domain, places: all, nameOf: limiterResourceName }] };
  const keys = request.descriptors.map((d) => descriptorCohortKey(d.entries));
  // A promoted candidate being watched: the version in force decides, and is counted.
  if (split.candidate === undefined) return { keys, sides: [{ domain, places: all, nameOf: limiterResourceName }] };
  const onCandidate = keys.map((k) => split.cohortOf(k) === 'candidate');
  return {
    keys,
    sides: [
      { domain, places: all.filter((i) => !onCandidate[i]), nameOf: limiterResourceName },
      {
        domain: split.candidate,
        places: all.filter((i) => onCandidate[i]),
        nameOf: (r) => split.names.get(r) ?? limiterResourceName(r),
      },
    ],
  };
}

/**
 * Answers a ShouldRateLimit request as envoyproxy/ratelimit does (src/service/ratelimit.go):
 * each descriptor is matched in the request's domain (`replaces` drop the named limits;
 * unmatched descriptors are OK without a limit; unlimited ones OK with the largest remaining);
 * each matched limit is charged `hits_addend`; the answer is OVER_LIMIT when a descriptor is
 * over its limit, or when every `quota_mode` descriptor is. `shadow_mode` limits count but
 * answer OK. Unlike envoyproxy/ratelimit's default, a request answered OVER_LIMIT is charged
 * nowhere: the permits its admitted descriptors took are given back. Limit overrides count in
 * `overrides`; one the table cannot admit never fails the request (see {@link matchLimits}).
 * While a rollout splits the domain, `splitOf` places each descriptor on a version.
 */
export async function shouldRateLimit(
  request: RlsRequest,
  limiter: Limiter,
  rules: LiveRules,
  overrides: OverrideTable,
  splitOf?: (domain: string) => DomainSplit | undefined,
): Promise<RlsResponse> {
  if (request.domain === '')
    throw new ServerError(ServerErrorCodes.INVALID_REQUEST, 'domain: must not be empty', { field: 'domain' });
  if (request.descriptors.length === 0) {
    throw new ServerError(ServerErrorCodes.INVALID_REQUEST, 'descriptors: must not be empty', { field: 'descriptors' });
  }
  // Own properties only: a domain named "constructor" or "__proto__" is just unknown.
  const domain = Object.hasOwn(rules.domains, request.domain) ? rules.domains[request.domain] : undefined;
  const split = splitOf?.(request.domain);
  // An unknown domain has no limits: every descriptor passes, as in envoyproxy/ratelimit.
  if (domain === undefined && split === undefined)
    return { overallCode: 'OK', statuses: request.descriptors.map(() => ({ code: 'OK', limitRemaining: 0 })) };
  const held: (() => void)[] = [];
  try {
    const { sides, keys } = sidesOf(request, domain, split);
    const placed = place(request, sides, overrides, held);
    const outcomes = await decideEach(request, limiter, placed);
    if (split !== undefined) {
      outcomes.forEach((o, i) => {
        if (o !== undefined) split.observe(keys![i]!, !over(o), o.decision?.source);
      });
    }
    return await answer(limiter, placed.matches, outcomes);
  } finally {
    for (const release of held) release();
  }
}

/** Decides every matched limit. */
async function decideEach(
  request: RlsRequest,
  limiter: Limiter,
  { matches, names, untracked }: Placed,
): Promise<(Outcome | undefined)[]> {
  const requestHits = Math.max(1, request.hitsAddend);
  return Promise.all(
    matches.map(async (match, i): Promise<Outcome | undefined> => {
      if (match === undefined || match.unlimited || match.policy === undefined) return undefined;
      const cost = request.descriptors[i]!.hitsAddend ?? requestHits;
      const resource = names[i]!;
      if (untracked.has(i)) return { match, resource, cost, decision: undefined, refused: true };
      try {
        return { match, resource, cost, decision: await limiter.try(resource, { key: match.key, cost }), refused: false };
      } catch (err) {
        // A cost the limit can never admit is over that limit, as envoy counts it.
        if (isSluiceError(err, ErrorCodes.COST_EXCEEDS_LIMIT) || isSluiceError(err, ErrorCodes.INVALID_COST)) {
          return { match, resource, cost, decision: undefined, refused: true };
        }
        throw err;
      }
    }),
  );
}

/** The request's answer from its descriptors' outcomes (a refused request gives its permits back). */
async function answer(
  limiter: Limiter,
  matches: readonly (MatchedLimit | undefined)[],
  outcomes: readonly (Outcome | undefined)[],
): Promise<RlsResponse> {
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
