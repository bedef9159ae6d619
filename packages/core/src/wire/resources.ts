import type { CompiledResource } from '../admission/resource.js';
import type { CompiledLimit } from '../shared/limits.js';

/** One resource as remote clients see it (`GET /v1/resources`): what they need to decide it while the service is away. */
export interface ResourceBody {
  /** The compiled limits, without their store codes. */
  readonly limits: readonly Omit<CompiledLimit, 'code'>[];
  readonly onStoreFailure: string;
  /** Whether `POST /v1/reserve` accepts the resource (clients lease only those). */
  readonly reservable: boolean;
  readonly lease?: { readonly ttlMs: number; readonly maxBatch: number; readonly targetMs: number; readonly maxShare: number };
}

/** A running rollout as remote clients see it: the split and the candidate's limits. */
export interface RolloutBody {
  /** The rollout's id (the salt of the cohort hash): answered to data-plane callers only. */
  readonly id?: string;
  readonly percent: number;
  readonly resources: Readonly<Record<string, ResourceBody>>;
}

/** `GET /v1/resources`. */
export interface ResourcesBody {
  /** The active rule version. */
  readonly version: number;
  /** Distinct clients the service saw in the last minute. */
  readonly clients: number;
  /** True when more resources are active than one answer lists. */
  readonly truncated: boolean;
  readonly resources: Readonly<Record<string, ResourceBody>>;
  readonly rollout?: RolloutBody;
}

/** A resource's settings (the limiter's `settingsOf`) as remote clients see them. */
export function encodeResource(
  s: Pick<CompiledResource, 'limits' | 'lease' | 'onStoreFailure'> & { readonly reservable: boolean },
): ResourceBody {
  return {
    limits: s.limits.map(({ code: _code, ...limit }) => limit),
    onStoreFailure: s.onStoreFailure,
    reservable: s.reservable,
    ...(s.lease === undefined ? {} : { lease: { ...s.lease } }),
  };
}
