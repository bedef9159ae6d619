/**
 * Partition ownership: at most one aggregator owns a partition at a time. An owner renews its
 * ownership well within its TTL; an owner that dies stops renewing, its ownership lapses and the
 * other aggregators take its partitions over. Aggregators also announce themselves in a registry
 * of live members, so each can take its fair share of the partitions.
 */
import type { OwnershipKind } from '@sluice/stream';

/** Where partition ownership, the member registry and window snapshots live. */
export interface OwnershipStore {
  /**
   * What kind of store it is, as aggregators announce it to each other: `memory` is private to
   * one process. @default 'other'
   */
  readonly kind?: OwnershipKind;
  /** Takes ownership of a free partition for `ttlMs` (or renews it when `owner` holds it). */
  acquire(partition: number, owner: string, ttlMs: number): Promise<boolean>;
  /** Extends the ownership if `owner` still holds it; false when it lapsed or another took it. */
  renew(partition: number, owner: string, ttlMs: number): Promise<boolean>;
  /** Gives the ownership up if `owner` holds it. */
  release(partition: number, owner: string): Promise<void>;
  /** Records `owner` as live for `ttlMs`; returns how many aggregators are live (itself included). */
  heartbeat(owner: string, ttlMs: number): Promise<number>;
  /** Removes `owner` from the live members. */
  leave(owner: string): Promise<void>;
  /** Stores a partition's snapshot, only while `owner` owns the partition; false otherwise. */
  saveSnapshot(partition: number, owner: string, snapshot: Uint8Array, ttlMs: number): Promise<boolean>;
  /** The partition's last snapshot, if any. */
  loadSnapshot(partition: number): Promise<Uint8Array | undefined>;
  /** Frees connections the store opened. Idempotent. */
  close(): Promise<void>;
}

/** Longest owner id. */
export const MAX_OWNER_LENGTH = 128;

interface Timed<T> {
  value: T;
  expiresAt: number;
}

/** Options of {@link MemoryOwnershipStore}. */
export interface MemoryOwnershipStoreOptions {
  /** Milliseconds; injected in tests. @default Date.now */
  now?: () => number;
}

/**
 * Ownership in one process: the embedded default, where every aggregator shares the process (and
 * for tests, with a manual clock). Snapshots are kept in memory too.
 */
export class MemoryOwnershipStore implements OwnershipStore {
  /** Private to this process. */
  readonly kind = 'memory';
  readonly #now: () => number;
  #owners = new Map<number, Timed<string>>();
  #members = new Map<string, number>();
  #snapshots = new Map<number, Timed<Uint8Array>>();

  constructor(options: MemoryOwnershipStoreOptions = {}) {
    this.#now = options.now ?? Date.now;
  }

  #holder(partition: number): string | undefined {
    const o = this.#owners.get(partition);
    if (o === undefined) return undefined;
    if (o.expiresAt <= this.#now()) {
      this.#owners.delete(partition);
      return undefined;
    }
    return o.value;
  }

  acquire(partition: number, owner: string, ttlMs: number): Promise<boolean> {
    const holder = this.#holder(partition);
    if (holder !== undefined && holder !== owner) return Promise.resolve(false);
    this.#owners.set(partition, { value: owner, expiresAt: this.#now() + ttlMs });
    return Promise.resolve(true);
  }

  renew(partition: number, owner: string, ttlMs: number): Promise<boolean> {
    if (this.#holder(partition) !== owner) return Promise.resolve(false);
    this.#owners.set(partition, { value: owner, expiresAt: this.#now() + ttlMs });
    return Promise.resolve(true);
  }

  release(partition: number, owner: string): Promise<void> {
    if (this.#holder(partition) === owner) this.#owners.delete(partition);
    return Promise.resolve();
  }

  heartbeat(owner: string, ttlMs: number): Promise<number> {
    const now = this.#now();
    this.#members.set(owner, now + ttlMs);
    for (const [m, until] of this.#members) if (until <= now) this.#members.delete(m);
    return Promise.resolve(this.#members.size);
  }

  leave(owner: string): Promise<void> {
    this.#members.delete(owner);
    return Promise.resolve();
  }

  saveSnapshot(partition: number, owner: string, snapshot: Uint8Array, ttlMs: number): Promise<boolean> {
    if (this.#holder(partition) !== owner) return Promise.resolve(false);
    this.#snapshots.set(partition, { value: snapshot.slice(), expiresAt: this.#now() + ttlMs });
    return Promise.resolve(true);
  }

  loadSnapshot(partition: number): Promise<Uint8Array | undefined> {
    const s = this.#snapshots.get(partition);
    if (s === undefined || s.expiresAt <= this.#now()) return Promise.resolve(undefined);
    return Promise.resolve(s.value.slice());
  }

  /** The current owner of a partition (for tests and status pages). */
  holder(partition: number): string | undefined {
    return this.#holder(partition);
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
