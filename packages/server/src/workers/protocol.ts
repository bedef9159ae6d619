/**
 * The messages between the primary of `sluice serve --workers N` and its workers (node:cluster's
 * IPC channel). Every message carries `sluice` so that other traffic on the channel (prom-client's
 * own, node's internal messages) is told apart.
 */

/** What the primary gathers from every worker: its Prometheus figures, or its `/v1/stats` body. */
export type GatherKind = 'metrics' | 'stats';

/** A worker to the primary. */
export type WorkerMessage =
  /** The worker listens: its HTTP base URL and gRPC port, as its own log line names them. */
  | { readonly sluice: 'serving'; readonly url: string | undefined; readonly grpcPort: number | undefined }
  /** Asks for every worker's answer to `kind` (`id` pairs the reply). */
  | { readonly sluice: 'gather'; readonly id: number; readonly kind: GatherKind; readonly arg: unknown }
  /** Its answer to the primary's `collect` `id`. */
  | { readonly sluice: 'collected'; readonly id: number; readonly value?: unknown; readonly error?: string }
  /** Remote clients heard of since the last report: id, the heartbeat header; ids that said goodbye. */
  | {
      readonly sluice: 'clients';
      readonly seen: readonly (readonly [string, string | undefined])[];
      readonly gone: readonly string[];
    };

/** The primary to a worker. */
export type PrimaryMessage =
  /** The answers of every worker (and the primary's own, for metrics) to the worker's `gather` `id`. */
  | { readonly sluice: 'gathered'; readonly id: number; readonly values?: readonly unknown[]; readonly error?: string }
  /** Asks for this worker's answer to `kind`. */
  | { readonly sluice: 'collect'; readonly id: number; readonly kind: GatherKind; readonly arg: unknown }
  /** The live remote clients over every worker. */
  | { readonly sluice: 'clients'; readonly count: number }
  /** Read the configuration and rule files again (what SIGHUP does to a single process). */
  | { readonly sluice: 'reload' }
  /** Drain and exit (what SIGTERM does to a single process). */
  | { readonly sluice: 'shutdown' };

/** Whether `m` is one of Sluice's messages (the channel carries others too). */
export function isSluiceMessage<T extends { sluice: string }>(m: unknown): m is T {
  return typeof m === 'object' && m !== null && typeof (m as { sluice?: unknown }).sluice === 'string';
}

/** The variable a worker finds its slot in (1..N; a replaced worker takes the slot of the one it replaces). */
export const WORKER_SLOT_ENV = 'SLUICE_WORKER_SLOT';

/** How long a gather waits for every worker's answer. */
export const GATHER_TIMEOUT_MS = 5000;

/** Most gathers a worker may have waiting at once; more are refused (each is an HTTP request). */
export const MAX_PENDING_GATHERS = 64;

/** How often a worker reports the remote clients it heard of, and the primary sends the count. */
export const CLIENTS_REPORT_MS = 1000;
