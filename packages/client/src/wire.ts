import {
  ErrorCodes,
  SluiceError,
  compileResource,
  systemClock,
  type CompiledResource,
  type LimitPolicy,
  type Logger,
} from '@sluice/core';

function protocol(message: string): SluiceError {
  return new SluiceError(ErrorCodes.STORE_PROTOCOL, `the service answered ${message}`);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const num = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** The client's view of the service's rules (`GET /v1/resources`). */
export interface RulesView {
  readonly version: number;
  /** The service's live clients (0 when it reports none). */
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
