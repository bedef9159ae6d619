import { OldestFirst } from '@sluice/core';

/** Most client ids remembered; beyond it the least recently seen are forgotten (the count saturates). */
export const MAX_TRACKED_CLIENTS = 10_000;

/** Client ids: what `sluice-client-id` may carry (anything else is ignored, not refused). */
const CLIENT_ID = /^[A-Za-z0-9_.:-]{1,64}$/;

/** The header a remote client names its heartbeat in: how often it polls the service, in ms. */
export const CLIENT_HEARTBEAT_HEADER = 'sluice-client-heartbeat-ms';

/** Heartbeats a client may miss before it is no longer counted. */
export const MISSED_HEARTBEATS = 3;
/** Bounds on how long a client is counted after it was last heard of, in ms. */
export const MIN_CLIENT_EXPIRY_MS = 3_000;
export const MAX_CLIENT_EXPIRY_MS = 600_000;

/** How often `count()` looks for expired ids at most: between looks it may count a few just gone. */
const SWEEP_MS = 1000;

/**
 * The live remote clients, from their `sluice-client-id` header. Remote clients divide limits by
 * this count for their fair share while the service is unavailable, so it must follow the fleet
 * as it is: a client that names its heartbeat (`sluice-client-heartbeat-ms`, its rule poll) is
 * counted until it misses {@link MISSED_HEARTBEATS} of them, one that says goodbye (on `close()`)
 * stops being counted at once, and a caller that names no heartbeat is counted for
 * `windowMs` after its last call. A restart of a client with a random id is then one client
 * again within a few heartbeats (at once when it closed cleanly), not two for a minute.
 * Bounded: at most {@link MAX_TRACKED_CLIENTS} ids.
 */
export class ClientCounter {
  /** id -> until when it is counted (ms); Map order is least recently seen first. */
  readonly #until = new Map<string, number>();
  /** The least recently seen id in O(1) amortised (ids move to the back when seen again). */
  readonly #oldest = new OldestFirst(this.#until);
  #sweptAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly windowMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Notes a request of `id` (a header value; malformed ids are ignored), with the heartbeat it
   * names (a header value: ms between its polls; ignored when malformed).
   */
  note(id: unknown, heartbeat?: unknown): void {
    if (typeof id !== 'string' || !CLIENT_ID.test(id)) return;
    const beat = typeof heartbeat === 'string' ? Number(heartbeat) : Number.NaN;
    const forMs =
      Number.isSafeInteger(beat) && beat > 0
        ? Math.min(MAX_CLIENT_EXPIRY_MS, Math.max(MIN_CLIENT_EXPIRY_MS, beat * MISSED_HEARTBEATS))
        : this.windowMs;
    this.#until.delete(id);
    this.#until.set(id, this.now() + forMs);
    if (this.#until.size > MAX_TRACKED_CLIENTS) this.#oldest.shift();
  }

  /** `id` closed: it is no longer counted. Returns whether it was. */
  goodbye(id: unknown): boolean {
    return typeof id === 'string' && this.#until.delete(id);
  }

  /** Live clients: those heard of within their expiry. */
  count(): number {
    const now = this.now();
    if (now - this.#sweptAt >= SWEEP_MS) {
      this.#sweptAt = now;
      for (const [id, until] of this.#until) if (until <= now) this.#until.delete(id);
    }
    return this.#until.size;
  }
}
