import type { OwnershipStore } from './store.js';

/** What an owner does when it gains or gives up a partition. */
export interface OwnershipHandlers {
  /** The partition is now ours: restore its state and start consuming it. */
  acquired(partition: number): Promise<void>;
  /**
   * The partition is no longer ours. `voluntary`: we give it up (to balance, or on close) and
   * still own the partition until this resolves, so the state can be snapshotted first; otherwise
   * the ownership lapsed or another owner took it and the state must be dropped.
   */
  released(partition: number, voluntary: boolean): Promise<void>;
}

/** Settings of a {@link PartitionOwnership}. */
export interface OwnershipSettings {
  readonly store: OwnershipStore;
  readonly partitions: number;
  readonly owner: string;
  /** Ownership TTL: a dead owner's partitions are taken over within about this long. */
  readonly ttlMs: number;
  /** How often ownership is renewed and free partitions looked for (a third of the TTL or less). */
  readonly renewMs: number;
  /** Failures of the ownership store (it is retried at the next round). */
  readonly onError?: (err: unknown) => void;
  /** Milliseconds, for ownership ages. @default Date.now */
  readonly now?: () => number;
}

/**
 * Keeps an aggregator's share of the partitions in two loops, each every `renewMs`:
 *
 * - renewal: records itself as a live member and renews the partitions it owns (one it could
 *   not renew is lost at once);
 * - balance: gives up partitions beyond its fair share (`ceil(partitions / live members)`) so a
 *   new member gets some, and takes free ones up to its share.
 *
 * The loops are separate because starting or stopping a partition's consumer can take seconds
 * (a broker client's start-up and shutdown); renewals must not wait behind it, or every other
 * partition would lapse meanwhile. Each loop runs a round only when its previous one finished.
 *
 * The handlers of one partition never overlap: `acquired` and `released` of a partition run one
 * after the other, in the order ownership changed, and a partition whose `released` is still
 * running is not taken again until it finished. Without that, a partition lost and taken back at
 * once (a lapse noticed late, the partition still free) would start the new consumer while the
 * old one was stopping, and the late end of the old hand-over would undo the new one.
 */
export class PartitionOwnership {
  readonly #s: OwnershipSettings;
  readonly #handlers: OwnershipHandlers;
  #owned = new Set<number>();
  /** When each owned partition was last taken or renewed (`now()` ms). */
  #renewedAt = new Map<number, number>();
  /** Live members at the last heartbeat that answered. */
  #members = 1;
  #timer: NodeJS.Timeout | undefined;
  #renewing: Promise<void> | undefined;
  #balancing: Promise<void> | undefined;
  /** The last handler call of each partition still running; the next one waits for it. */
  #handing = new Map<number, Promise<void>>();
  #closed = false;
  /** Where this owner starts looking for free partitions, so owners do not all race for the same one. */
  readonly #offset: number;
  readonly #now: () => number;

  constructor(settings: OwnershipSettings, handlers: OwnershipHandlers) {
    this.#s = settings;
    this.#handlers = handlers;
    this.#now = settings.now ?? Date.now;
    let h = 0;
    for (let i = 0; i < settings.owner.length; i++) h = (h * 31 + settings.owner.charCodeAt(i)) >>> 0;
    this.#offset = h % settings.partitions;
  }

  /** Partitions owned now, sorted. */
  get owned(): number[] {
    return [...this.#owned].sort((a, b) => a - b);
  }

  /** Runs the first round now and the next ones every `renewMs`. */
  start(): Promise<void> {
    const first = this.round();
    this.#timer = setInterval(() => {
      // Each loop skips a tick while its previous round is still running.
      void this.#renewRound();
      void this.#balanceRound();
    }, this.#s.renewMs);
    this.#timer.unref();
    return first;
  }

  /** One renewal round, then one balance round (exposed for tests that drive time themselves). */
  async round(): Promise<void> {
    await this.#renewRound();
    await this.#balanceRound();
  }

  #renewRound(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#renewing ??= this.#renew().finally(() => {
      this.#renewing = undefined;
    });
    return this.#renewing;
  }

  #balanceRound(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#balancing ??= this.#balance().finally(() => {
      this.#balancing = undefined;
    });
    return this.#balancing;
  }

  async #renew(): Promise<void> {
    const { store, owner, ttlMs } = this.#s;
    try {
      this.#members = Math.max(1, await store.heartbeat(owner, ttlMs));
    } catch (e) {
      // Renewals below still run: they decide, per partition, whether to keep consuming.
      this.#s.onError?.(e);
    }
    try {
      for (const p of this.owned) {
        // Given up by the balance loop meanwhile: renewing would hold a partition nobody consumes.
        if (this.#closed || !this.#owned.has(p)) continue;
        let kept = false;
        try {
          kept = await store.renew(p, owner, ttlMs);
          if (kept) this.#renewedAt.set(p, this.#now());
        } catch (e) {
          this.#s.onError?.(e);
          // Unknown: keep consuming until the ownership would have lapsed anyway, then let it go.
          kept = this.#now() - (this.#renewedAt.get(p) ?? 0) < ttlMs;
        }
        if (!kept && this.#owned.has(p)) {
          this.#renewedAt.delete(p);
          this.#owned.delete(p);
          // Not awaited: stopping a consumer may take seconds, and the other renewals are due.
          // close() waits for it; failures are reported in #handOver.
          void this.#handOver(p, () => this.#handlers.released(p, false)).catch(() => undefined);
        }
      }
    } catch (e) {
      this.#s.onError?.(e);
    }
  }

  async #balance(): Promise<void> {
    const { store, owner, ttlMs, partitions } = this.#s;
    try {
      const share = Math.ceil(partitions / this.#members);
      // Give up the highest partitions beyond the share; others pick them up.
      for (const p of this.owned.reverse()) {
        if (this.#owned.size <= share || this.#closed) break;
        await this.#giveUp(p);
      }
      for (let i = 0; i < partitions && this.#owned.size < share && !this.#closed; i++) {
        const p = (this.#offset + i) % partitions;
        // A partition still being handed over (the consumer of a lost partition stopping) is taken
        // again only once that finished, at a later round.
        if (this.#owned.has(p) || this.#handing.has(p)) continue;
        if (await store.acquire(p, owner, ttlMs)) {
          this.#owned.add(p);
          this.#renewedAt.set(p, this.#now());
          try {
            await this.#handOver(p, () => this.#handlers.acquired(p));
          } catch {
            // Could not start consuming (the stream is down): let another owner, or a later
            // round, try. Unless the renewal loop found the partition lost meanwhile and let it go.
            if (this.#owned.has(p)) await this.#giveUp(p);
          }
        }
      }
    } catch (e) {
      this.#s.onError?.(e);
    }
  }

  async #giveUp(p: number): Promise<void> {
    this.#owned.delete(p);
    this.#renewedAt.delete(p);
    try {
      // The partition is held until the handler finished, so it can snapshot first.
      await this.#handOver(p, () => this.#handlers.released(p, true));
    } catch {
      // Reported in #handOver; the partition is given up all the same.
    } finally {
      await this.#s.store.release(p, this.#s.owner);
    }
  }

  /**
   * Runs a handler of partition `p` after the previous one of `p` finished. Rejects (after
   * reporting it) when the handler throws.
   */
  #handOver(p: number, handler: () => Promise<void>): Promise<void> {
    const previous = this.#handing.get(p) ?? Promise.resolve();
    const run = previous.then(handler).catch((e: unknown) => {
      this.#s.onError?.(e);
      throw e;
    });
    // The chain itself never rejects: a failed hand-over must not stall the next one.
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.#handing.set(p, settled);
    void settled.then(() => {
      if (this.#handing.get(p) === settled) this.#handing.delete(p);
    });
    return run;
  }

  /** Stops the rounds and gives every partition up (snapshotted first) and leaves the members. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    await Promise.all([this.#renewing, this.#balancing]);
    for (const p of this.owned) {
      try {
        await this.#giveUp(p);
      } catch (e) {
        this.#s.onError?.(e);
      }
    }
    // Consumers of lost partitions still stopping.
    await Promise.all(this.#handing.values());
    try {
      await this.#s.store.leave(this.#s.owner);
    } catch (e) {
      this.#s.onError?.(e);
    }
  }
}
