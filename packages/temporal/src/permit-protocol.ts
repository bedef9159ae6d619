/**
 * What the workflow helper and its local activity exchange. Workflow-safe: types and constants only.
 */
import type { SluicePriority } from './headers.js';

/** Name of the local activity the workflow helper calls to ask the limiter. */
export const PERMIT_ACTIVITY = 'sluicePermit';

/** A workflow's request for permits. */
export interface PermitRequest {
  readonly resource: string;
  /** Absent for the resource's one shared limit. */
  readonly key?: string;
  /** @default 1 */
  readonly cost?: number;
  readonly priority?: SluicePriority;
  readonly tenant?: string;
}

/** The limiter's answer, as plain data recorded in the workflow's history. */
export interface PermitAnswer {
  readonly allowed: boolean;
  readonly reason: string;
  readonly retryAfterMs: number;
  readonly limit: number;
  readonly remaining: number;
  /**
   * The concurrency permit's id (a decision's `permitId`), set when the resource has a
   * concurrency limit: release it with `releasePermit`. Named `leaseId` on purpose: this answer is
   * recorded in workflow histories, and renaming the field would break the replay of running
   * workflows, so the wire name stays.
   */
  readonly leaseId?: string;
}

/** A request to give a concurrency permit back. */
export interface ReleaseRequest {
  readonly resource: string;
  readonly key?: string;
  /** The permit's id (a decision's `permitId`); the wire name stays `leaseId` for replay (see {@link PermitAnswer.leaseId}). */
  readonly leaseId: string;
}

/** Name of the local activity that releases a concurrency permit taken by the workflow helper. */
export const RELEASE_ACTIVITY = 'sluiceReleasePermit';
