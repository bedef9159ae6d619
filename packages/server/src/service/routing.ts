import type { Cohort, DecisionSource } from '@sluice/core';
import type { EnvoyDomain } from '@sluice/rules';

/**
 * How a running rollout splits traffic between rule versions (see `RolloutRunner`), for every
 * operation of the service: a resource's keys by `route`, an Envoy domain's descriptors by
 * `domain`. Each decision is counted for its cohort by `observe`, but for those the store-failure
 * policy made (`source: 'fallback'`): they say how the store was, not how the rules are.
 */
export interface RolloutRouting {
  /** The limiter resource deciding `key` of `resource`. */
  route(resource: string, key?: string): string;
  /** Counts a decision of `key` of `resource` for its cohort (an Envoy domain's label and descriptor cohort key). */
  observe(resource: string, key: string | undefined, allowed: boolean, source?: DecisionSource): void;
  /** Whose limits decide `key` of `resource` while a rollout splits it; undefined when none does. */
  cohortOf?(resource: string, key?: string): Cohort | undefined;
  /** The split in force: the rollout's id (the hash's salt), share, and candidate limiter names. */
  split?(): { id: string; percent: number; names: ReadonlyMap<string, string> } | undefined;
  /** How the descriptors of Envoy domain `domain` are split now, or undefined when they are not. */
  domain?(domain: string): DomainSplit | undefined;
}

/**
 * How one Envoy domain is split during a rollout: each descriptor goes by the cohort of its
 * entries (see `descriptorCohortKey`), a candidate descriptor is matched in the candidate's
 * domain and counted under the candidate's names.
 */
export interface DomainSplit {
  /**
   * The candidate's version of the domain; undefined while a promoted candidate is watched:
   * the version in force then decides every descriptor, each counted for the candidate.
   */
  readonly candidate: EnvoyDomain | undefined;
  /** The limiter's names of the candidate's limits, by rule resource name. */
  readonly names: ReadonlyMap<string, string>;
  /** The cohort of a descriptor, by its cohort key. */
  cohortOf(key: string): Cohort;
  /** Counts one decided descriptor for its cohort. */
  observe(key: string, allowed: boolean, source?: DecisionSource): void;
}

/** No rollout: every key on the rules in force. */
export const NO_ROLLOUT: RolloutRouting = { route: (resource) => resource, observe: () => undefined };
