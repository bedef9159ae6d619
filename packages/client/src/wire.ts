import {
  BOOK_OUTCOMES,
  ErrorCodes,
  SluiceError,
  compileResource,
  systemClock,
  type BookingInfo,
  type CompiledResource,
  type Decision,
  type LimitPolicy,
  type LimitStatus,
  type Logger,
} from '@sluice/core';

function protocol(message: string): SluiceError {
  return new SluiceError(ErrorCodes.STORE_PROTOCOL, `the service answered ${message}`);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const num = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** A decision as the service answers it (`?statuses=1`), as a {@link Decision}. */
export function decisionFromBody(body: unknown): Decision {
  if (!isObject(body) || typeof body.allowed !== 'boolean' || !num(body.limit) || !num(body.remaining)) {
    throw protocol('a malformed decision');
  }
  if (!num(body.retryAfterMs) || !num(body.resetAfterMs) || typeof body.reason !== 'string' || typeof body.limitId !== 'string') {
    throw protocol('a malformed decision');
  }
  const statuses = Array.isArray(body.statuses) ? (body.statuses as LimitStatus[]) : [];
  return {
    allowed: body.allowed,
    limit: body.limit,
    remaining: body.remaining,
    retryAfterMs: body.retryAfterMs,
    resetAfterMs: body.resetAfterMs,
    reason: body.reason as Decision['reason'],
    limitId: body.limitId,
    statuses,
    source: (typeof body.source === 'string' ? body.source : 'store') as NonNullable<Decision['source']>,
    ...permitOf(body),
    ...(num(body.waitedMs) ? { waitedMs: body.waitedMs } : {}),
    ...(isObject(body.shadow) ? { shadow: body.shadow as unknown as NonNullable<Decision['shadow']> } : {}),
    ...(body.booking === undefined ? {} : { booking: bookingFromBody(body.booking) }),
    ...(body.boosted === true ? { boosted: true as const } : {}),
  };
}

/**
 * The permit id a decision body carries, as the decision's `permitId` and its deprecated alias
 * `leaseId`: the body's `permitId`, else its `leaseId` (a server from before the rename sends only that).
 */
function permitOf(body: Record<string, unknown>): { permitId: string; leaseId: string } | Record<string, never> {
  const permitId =
    typeof body.permitId === 'string' ? body.permitId : typeof body.leaseId === 'string' ? body.leaseId : undefined;
  return permitId === undefined ? {} : { permitId, leaseId: permitId };
}

/** A decision's `booking` as the service answers it. */
export function bookingFromBody(v: unknown): BookingInfo {
  if (
    !isObject(v) ||
    !(BOOK_OUTCOMES as readonly unknown[]).includes(v.outcome) ||
    typeof v.id !== 'string' ||
    !num(v.startsInMs) ||
    !num(v.expiresInMs)
  ) {
    throw protocol('a malformed booking');
  }
  const info = { outcome: v.outcome as BookingInfo['outcome'], id: v.id, startsInMs: v.startsInMs, expiresInMs: v.expiresInMs };
  return typeof v.token === 'string' ? { ...info, token: v.token } : info;
}

/** The client's view of the service's rules (`GET /v1/resources`). */
export interface RulesView {
  readonly version: number;
  /** Distinct clients the service saw in the last minute (0 when it reports none). */
  readonly clients: number;
  readonly resources: ReadonlyMap<string, ViewResource>;
  /** A rule rollout in progress: keys of its cohort are decided by its candidate's limits. */
  readonly rollout?: RolloutView;
}

/**
 * A rollout as the service reports it: its id (the salt of the cohort hash, `cohortAt` in
 * `@sluice/core`), the share of keys on the candidate, and the candidate's limits of each split
 * resource.
 */
export interface RolloutView {
  readonly id: string;
  readonly percent: number;
  readonly resources: ReadonlyMap<string, ViewResource>;
}

/** One resource of the view: its limits as policies (to rebuild locally) and compiled. */
export interface ViewResource {
  readonly policies: readonly LimitPolicy[];
  readonly compiled: CompiledResource;
  /** The service accepts reservations for it (no concurrency limit, split or core share). */
  readonly reservable: boolean;
}

/**
 * Decodes `GET /v1/resources`. A resource the client cannot compile is left out (and logged):
 * calls to it then fail as unknown rather than being decided on a wrong limit.
 */
export function viewFromBody(body: unknown, logger?: Logger): RulesView {
  if (!isObject(body) || !num(body.version) || !isObject(body.resources)) throw protocol('a malformed resource list');
  const resources = resourcesOf(body.resources, logger);
  const rollout = rolloutOf(body.rollout, logger);
  return {
    version: body.version,
    clients: num(body.clients) ? Math.max(0, Math.floor(body.clients)) : 0,
    resources,
    ...(rollout === undefined ? {} : { rollout }),
  };
}

function resourcesOf(raws: Record<string, unknown>, logger?: Logger): Map<string, ViewResource> {
  const resources = new Map<string, ViewResource>();
  for (const [name, raw] of Object.entries(raws)) {
    if (!isObject(raw) || !Array.isArray(raw.limits)) continue;
    try {
      const policies = raw.limits.map((l: unknown) => {
        if (!isObject(l)) throw protocol('a malformed limit');
        const { id, algorithm, limit, windowMs, burst, slices, permitTtlMs } = l;
        return { id, algorithm, limit, windowMs, burst, slices, permitTtlMs } as LimitPolicy;
      });
      const compiled = compileResource(
        name,
        {
          limits: policies,
          prefilter: false,
          ...(typeof raw.onStoreFailure === 'string' ? { onStoreFailure: raw.onStoreFailure as 'local' } : {}),
          ...(isObject(raw.lease) ? { lease: raw.lease } : {}),
        },
        systemClock,
      );
      const reservable = raw.reservable !== false && !compiled.limits.some((l) => l.algorithm === 'concurrency');
      resources.set(name, { policies, compiled, reservable });
    } catch (err) {
      logger?.warn({ err, resource: name }, 'resource from the service left out: the client cannot compile it');
    }
  }
  return resources;
}

/** A rollout the service reports; a malformed one is left out (the client then splits nothing). */
function rolloutOf(raw: unknown, logger?: Logger): RolloutView | undefined {
  if (raw === undefined) return undefined;
  if (!isObject(raw) || typeof raw.id !== 'string' || !num(raw.percent) || !isObject(raw.resources)) {
    logger?.warn({ rollout: raw }, 'rollout from the service left out: malformed');
    return undefined;
  }
  return { id: raw.id, percent: Math.min(100, Math.max(0, raw.percent)), resources: resourcesOf(raw.resources, logger) };
}
