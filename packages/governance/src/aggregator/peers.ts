/**
 * What an aggregator learns from the announcements of the other aggregators of its group: a
 * partition layout unlike its own, and a partition that another aggregator owns at the same
 * time (two ownership stores that do not see each other: each aggregator with a memory store of
 * its own on one broker). Pure bookkeeping: the aggregator decides what to do.
 */
import type { AggregatorAnnouncement } from '@sluice/stream';

/** Most peers remembered; past it the one heard from least recently is forgotten. */
export const MAX_PEERS = 1024;

interface Peer {
  /** Partitions its previous announcement claimed. */
  owned: ReadonlySet<number>;
  /** When its previous announcement arrived (the aggregator's clock). */
  heardAt: number;
}

/** What one announcement showed. */
export interface PeerFinding {
  /** The peer splits the stream into another number of partitions, or with another layout version. */
  readonly layoutDiffers: boolean;
  /**
   * Partitions the peer claimed in this announcement and the one before, while this aggregator
   * owned them the whole time between the two: a second owner, not a hand-over in flight.
   */
  readonly doublyOwned: number[];
}

/** The peers of one aggregator. */
export class Peers {
  readonly #peers = new Map<string, Peer>();

  /** Peers heard from (at most {@link MAX_PEERS}). */
  get size(): number {
    return this.#peers.size;
  }

  /**
   * Takes a peer's announcement in. `ownedSince(p)` is when this aggregator took partition `p`
   * (undefined when it does not own it); `now` is when the announcement arrived.
   */
  heard(
    a: AggregatorAnnouncement,
    own: { partitions: number; layoutVersion: number },
    ownedSince: (partition: number) => number | undefined,
    now: number,
  ): PeerFinding {
    const previous = this.#peers.get(a.id);
    const doublyOwned: number[] = [];
    if (previous !== undefined) {
      for (const p of a.owned) {
        const since = ownedSince(p);
        if (since !== undefined && since <= previous.heardAt && previous.owned.has(p)) doublyOwned.push(p);
      }
      this.#peers.delete(a.id);
    } else if (this.#peers.size >= MAX_PEERS) {
      this.#peers.delete(this.#peers.keys().next().value!);
    }
    // Re-inserted: the map's order is the order peers were last heard from.
    this.#peers.set(a.id, { owned: new Set(a.owned), heardAt: now });
    return {
      layoutDiffers: a.partitions !== own.partitions || a.layoutVersion !== own.layoutVersion,
      doublyOwned,
    };
  }

  /** Forgets peers not heard from since `before` (they stopped or left the group). */
  forget(before: number): void {
    for (const [id, peer] of this.#peers) if (peer.heardAt < before) this.#peers.delete(id);
  }
}
