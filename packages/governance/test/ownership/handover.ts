/**
 * The partition hand-over suite every event transport runs: aggregators join, leave and lose
 * partitions while a publisher keeps writing, so partitions move back and forth between them, and
 * every batch published must still be read. A batch may be read twice (delivery is
 * at-least-once: a batch in flight at a hand-over may reach the next owner too), never lost.
 *
 * Each aggregator has its own transport when the transport is shared (as aggregator processes
 * would). Waits are bounded polls with generous limits; nothing asserts how long anything took.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Aggregator, MemoryOwnershipStore, type OwnershipStore } from '@sluice/governance';
import {
  TransportErrorCodes,
  decodeEvents,
  encodeEvents,
  type BatchHandler,
  type EventTransport,
  type Subscription,
} from '@sluice/stream';
import { waitFor } from '../../../../test/wait-for.js';

/** A transport under test. */
export interface HandoverTarget {
  name: string;
  /** Partition count the made transports use (at least 2). */
  partitions: number;
  /** A transport on the shared server (or in-process) using stream names under `prefix`. */
  make(prefix: string): Promise<EventTransport>;
  /** True when two transports made with the same prefix see each other's data. */
  shared: boolean;
  /** Bound on each wait for the batches published so far to be read. @default 30000 */
  drainMs?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Ownership TTL of the aggregators: ownership rounds run every third of it. */
const OWNERSHIP_TTL_MS = 1_500;
/** Extra time a consumer takes to start and to stop: together, longer than a round. */
const CONSUMER_START_MS = 400;
const CONSUMER_STOP_MS = 600;

/** One event whose user field carries a sequence number (from 1). */
function seqEvents(seq: number): Uint8Array {
  return encodeEvents([{ resource: 7, path: 0, user: seq, ip: 0, tenant: 0, timestampMs: Date.now(), status: 200, outcome: 0 }]);
}

/**
 * Records every batch an aggregator's handler finished with: what the transport delivered to
 * the owner of the partition, after the owner took it. Starting and stopping a consumer take a
 * while, as a broker client's start-up and shutdown do (seconds for some), so hand-overs
 * overlap with the ownership rounds as they do in production.
 */
class RecordingTransport implements EventTransport {
  readonly name: string;
  readonly partitions: number;

  constructor(
    private readonly inner: EventTransport,
    private readonly read: Map<number, number>,
  ) {
    this.name = inner.name;
    this.partitions = inner.partitions;
  }

  publish(partition: number, batch: Uint8Array): Promise<void> {
    return this.inner.publish(partition, batch);
  }

  async consume(partition: number, group: string, handler: BatchHandler): Promise<Subscription> {
    await sleep(CONSUMER_START_MS);
    const sub = await this.inner.consume(partition, group, async (batch, info) => {
      await handler(batch, info);
      for (const e of decodeEvents(batch)) this.read.set(e.user, (this.read.get(e.user) ?? 0) + 1);
    });
    return {
      // Reading stops at once (as the transports' stop does); letting go takes longer.
      stop: async () => {
        await sub.stop();
        await sleep(CONSUMER_STOP_MS);
      },
    };
  }

  broadcast(message: Uint8Array): Promise<void> {
    return this.inner.broadcast(message);
  }

  subscribeDecisions(handler: (message: Uint8Array) => void): Promise<Subscription> {
    return this.inner.subscribeDecisions(handler);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

/**
 * Ownership in one process, where a test can make a partition's ownership lapse (as when its
 * owner stalled past the TTL): the owner finds out at its next renewal, and any owner may take
 * the partition.
 */
class LapsingOwnership extends MemoryOwnershipStore {
  lapse(partition: number): Promise<void> {
    const holder = this.holder(partition);
    return holder === undefined ? Promise.resolve() : this.release(partition, holder);
  }
}

let seq = 0;

export function runHandoverSuite(target: HandoverTarget): void {
  describe(`partition hand-over: ${target.name}`, () => {
    const open: EventTransport[] = [];
    const aggregators: Aggregator[] = [];
    const make = async (prefix: string): Promise<EventTransport> => {
      const t = await target.make(prefix);
      open.push(t);
      return t;
    };
    afterAll(async () => {
      await Promise.all(aggregators.map((a) => a.close()));
      await Promise.all(open.map((t) => t.close()));
    });

    it('reads every batch while partitions move back and forth between aggregators under traffic', async () => {
      const n = target.partitions;
      const prefix = `handover-${process.pid}-${Date.now().toString(36)}-${seq++}`;
      const publisher = await make(prefix);
      const lapsing = new LapsingOwnership();
      const read = new Map<number, number>();
      let published = 0;
      let publishing = false;
      const publishErrors: unknown[] = [];
      const start = async (id: string, store: OwnershipStore = lapsing) => {
        const transport = new RecordingTransport(target.shared ? await make(prefix) : publisher, read);
        // A short ownership TTL keeps the rounds (a third of it) quick; a stall past it is one more hand-over.
        const a = new Aggregator({ transport, rules: {}, ownership: store, id, ownershipTtlMs: OWNERSHIP_TTL_MS, snapshotMs: 0 });
        aggregators.push(a);
        await a.start();
        return a;
      };
      const stop = async (a: Aggregator) => {
        await a.close();
        aggregators.splice(aggregators.indexOf(a), 1);
      };
      const owners = () => aggregators.map((a) => `${a.id}:${a.partitions.join('/')}`).join(' ');
      const missing = (upTo: number) => {
        const out: number[] = [];
        for (let s = 1; s <= upTo; s++) if (!read.has(s)) out.push(s);
        return out;
      };
      /** Waits until every batch published so far has been read; explains what is missing if not. */
      const allRead = async (what: string, ms: number) => {
        const upTo = published;
        await waitFor(() => missing(upTo).length === 0, what, ms).catch(() => {
          const m = missing(upTo);
          const byPartition = Array.from({ length: n }, (_, p) => m.filter((s) => s % n === p).length);
          throw new Error(
            `${what}: ${m.length} of ${upTo} batches not read (by partition ${JSON.stringify(byPartition)}, first ${m.slice(0, 5).join(', ')}); owners ${owners()}`,
          );
        });
      };
      /**
       * Waits for an ownership, then until the new owners have read everything published so
       * far: a partition that changed hands is read on, not only after its next owner change.
       */
      const settle = async (what: string, check: () => boolean) => {
        await waitFor(check, `${what} (now ${owners()})`, 60_000);
        // Consumers still starting or stopping finish meanwhile, and traffic reaches the new owners.
        await sleep(CONSUMER_START_MS + CONSUMER_STOP_MS + 200);
        if (publishing) await allRead(`after ${what}`, target.drainMs ?? 30_000);
      };
      const shared = (x: Aggregator, y: Aggregator) =>
        x.partitions.length > 0 && y.partitions.length > 0 && x.partitions.length + y.partitions.length === n;

      const a = await start('a');
      await settle('a to own every partition', () => a.partitions.length === n);

      publishing = true;
      const traffic = (async () => {
        while (publishing) {
          const s = published + 1;
          try {
            await publisher.publish(s % n, seqEvents(s));
            published = s;
          } catch (e) {
            publishErrors.push(e);
            await sleep(50);
          }
          if (s % 8 === 0) await sleep(5);
        }
      })();

      let moves = 0;
      try {
        // b joins: a gives half up, b takes it.
        const b = await start('b');
        await settle('a and b to share', () => shared(a, b));
        moves++;
        // Every partition's ownership lapses in turn: whoever is quickest takes the partition, often its old
        // owner again while the consumer it lost is still stopping.
        const acquisitions = () => aggregators.reduce((sum, x) => sum + x.stats().acquisitions, 0);
        for (let p = 0; p < n; p++) {
          const before = acquisitions();
          await lapsing.lapse(p);
          await settle(`partition ${p} to be owned again`, () => acquisitions() > before && shared(a, b));
          moves++;
        }
        // b leaves: a takes everything back; c joins; a leaves; a2 joins.
        await stop(b);
        await settle('a to own every partition again', () => a.partitions.length === n);
        const c = await start('c');
        await settle('a and c to share', () => shared(a, c));
        await stop(a);
        await settle('c to own every partition', () => c.partitions.length === n);
        const a2 = await start('a2');
        await settle('c and a2 to share', () => shared(c, a2));
        moves += 4;
      } finally {
        publishing = false;
        await traffic;
      }
      expect(moves).toBe(n + 5);
      // A publish the stream did not accept in time (a loaded machine) was sent again with the
      // same sequence number; anything else is a failure.
      for (const e of publishErrors) expect(e).toMatchObject({ code: TransportErrorCodes.UNAVAILABLE });
      expect(published).toBeGreaterThan(100);

      // Every batch published is read, by whichever aggregator holds its partition now.
      await allRead('at the end', target.drainMs ?? 30_000);
      // Nothing was read that was not published.
      expect(Math.max(...read.keys())).toBe(published);
    }, 600_000);
  });
}
