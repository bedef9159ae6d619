import type { LeaseStore } from './leases.js';

/** What an owner does when it gains or gives up a partition. */
export interface OwnershipHandlers {
  /** The partition is now ours: restore its state and start consuming it. */
  acquired(partition: number): Promise<void>;
  /**
   * The partition is no longer ours. `voluntary`: we give it up (to balance, or on close) and
   * still hold the lease until this resolves, so the state can be snapshotted first; otherwise
   * the lease lapsed or another owner took it and the state must be dropped.
   */
  released(partition: number, voluntary: boolean): Promise<void>;
}

/** Settings of a {@link PartitionOwnership}. */
export interface OwnershipSettings {
  readonly store: LeaseStore;
  readonly partitions: number;
  readonly owner: string;
  /** Lease TTL: a dead owner's partitions are taken over within about this long. */
  readonly leaseTtlMs: number;
  /** How often leases are renewed and free partitions looked for (a third of the TTL or less). */
  readonly renewMs: number;
  /** Failures of the lease store (it is retried at the next round). */
  readonly onError?: (err: unknown) => void;
  /** Milliseconds, for lease ages. @default Date.now */
  readonly now?: () => number;
}

/**
 * Keeps an aggregator's share of the partitions in two loops, each every `renewMs`:
 *
 * - renewal: records itself as a live member and renews its leases (a lease it could not renew
 *   is lost at once);
 * - balance: gives up partitions beyond its fair share (`ceil(partitions / live members)`) so a
 *   new member gets some, and takes free ones up to its share.
 *
 * The loops are separate because starting to consume a partition can take seconds (a broker
 * client's start-up); renewals must not wait behind it, or every other lease would lapse
 * meanwhile. Each loop runs a round only when its previous one finished.
 */
export class PartitionOwnership {
  readonly #s: OwnershipSettings;
  readonly #handlers: OwnershipHandlers;
  #owned = new Set<number>();
  /** When each owned lease was last taken or renewed (`now()` ms). */
  #renewedAt = new Map<number, number>();
  /** Live members at the last heartbeat that answered. */
  #members = 1;
  #timer: NodeJS.Timeout | undefined;
  #renewing: Promise<void> | undefined;
  #balancing: Promise<void> | undefined;
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
    const { store, owner, leaseTtlMs } = this.#s;
    try {
      this.#members = Math.max(1, await store.heartbeat(owner, leaseTtlMs));
    } catch (e) {
      // Renewals below still run: they decide, per lease, whether to keep consuming.
      this.#s.onError?.(e);
    }
    try {
      for (const p of this.owned) {
        // Given up by the balance loop meanwhile: renewing would hold a lease nobody consumes.
        if (this.#closed || !this.#owned.has(p)) continue;
        let kept = false;
        try {
          kept = await store.renew(p, owner, leaseTtlMs);
          if (kept) this.#renewedAt.set(p, this.#now());
        } catch (e) {
          this.#s.onError?.(e);
          // Unknown: keep consuming until the lease would have lapsed anyway, then let it go.
          kept = this.#now() - (this.#renewedAt.get(p) ?? 0) < leaseTtlMs;
        }
        if (!kept && this.#owned.has(p)) {
          this.#renewedAt.delete(p);
          this.#owned.delete(p);
          await this.#handlers.released(p, false);
        }
      }
    } catch (e) {
      this.#s.onError?.(e);
    }
  }

  async #balance(): Promise<void> {
    const { store, owner, leaseTtlMs, partitions } = this.#s;
    try {
      const share = Math.ceil(partitions / this.#members);
      // Give up the highest partitions beyond the share; others pick them up.
      for (const p of this.owned.reverse()) {
        if (this.#owned.size <= share || this.#closed) break;
        await this.#giveUp(p);
      }
      for (let i = 0; i < partitions && this.#owned.size < share && !this.#closed; i++) {
        const p = (this.#offset + i) % partitions;
        if (this.#owned.has(p)) continue;
        if (await store.acquire(p, owner, leaseTtlMs)) {
          this.#owned.add(p);
          this.#renewedAt.set(p, this.#now());
          try {
            await this.#handlers.acquired(p);
          } catch (e) {
            // Could not start consuming (the stream is down): let another owner, or a later round, try.
            this.#s.onError?.(e);
            await this.#giveUp(p);
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
      await this.#handlers.released(p, true);
    } finally {
      await this.#s.store.release(p, this.#s.owner);
    }
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
    try {
      await this.#s.store.leave(this.#s.owner);
    } catch (e) {
      this.#s.onError?.(e);
    }
  }
}
