/**
 * The one conformance suite every event transport runs: the in-process one and each
 * server-backed one against its real server. Waits are bounded polls with generous limits;
 * nothing asserts how long a call took.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { TransportErrorCodes, type BatchInfo, type EventTransport, type Subscription } from '@sluice/stream';
import { waitFor } from '../../../../test/wait-for.js';

/** A transport whose connection to its server a test can cut and restore. */
export interface CuttableTransport {
  transport: EventTransport;
  /** The server goes away for this transport (connections dropped, new ones refused). */
  down(): Promise<void>;
  /** The server is reachable again. */
  up(): Promise<void>;
  /** Frees what `makeCuttable` started besides the transport. */
  dispose(): Promise<void>;
}

/** A transport under test. */
export interface TransportTarget {
  name: string;
  /** Partition count the made transports use (at least 2). */
  partitions: number;
  /** A transport on the shared server (or in-process) using stream names under `prefix`. */
  make(prefix: string): Promise<EventTransport>;
  /** True when two transports made with the same prefix see each other's data. */
  shared: boolean;
  /** For server-backed transports: one whose server can go away. Publish must time out fast. */
  makeCuttable?(prefix: string): Promise<CuttableTransport>;
}

/** A 32-byte batch carrying a sequence number. */
export function seqBatch(seq: number): Uint8Array {
  const b = new Uint8Array(32);
  new DataView(b.buffer).setUint32(0, seq);
  b.fill(0xab, 4);
  return b;
}

export function seqOf(batch: Uint8Array): number {
  return new DataView(batch.buffer, batch.byteOffset, batch.byteLength).getUint32(0);
}

export const range = (from: number, to: number): number[] => Array.from({ length: to - from }, (_, i) => from + i);

function handleCounts(): { sockets: number; timers: number } {
  const info = process.getActiveResourcesInfo();
  return {
    sockets: info.filter((r) => r === 'TCPSocketWrap' || r === 'TCPWrap').length,
    timers: info.filter((r) => r === 'Timeout').length,
  };
}

/** Handle counts once they stop changing (sockets close asynchronously). */
async function settledHandleCounts(): Promise<{ sockets: number; timers: number }> {
  let last = handleCounts();
  for (let i = 0; i < 50; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const now = handleCounts();
    if (now.sockets === last.sockets && now.timers === last.timers) return now;
    last = now;
  }
  return last;
}

let seq = 0;
const newPrefix = (): string => `conf-${process.pid}-${Date.now().toString(36)}-${seq++}`;

export function runTransportConformance(target: TransportTarget): void {
  describe(`transport conformance: ${target.name}`, () => {
    const open: EventTransport[] = [];
    const make = async (prefix: string): Promise<EventTransport> => {
      const t = await target.make(prefix);
      open.push(t);
      return t;
    };
    afterAll(async () => {
      await Promise.all(open.map((t) => t.close()));
    });

    /** Starts a consumer that records sequence numbers and batch infos. */
    async function recorder(t: EventTransport, partition: number, group: string, poison: Set<number> = new Set()) {
      const seen: number[] = [];
      const infos: BatchInfo[] = [];
      const sub = await t.consume(partition, group, async (batch, info) => {
        const s = seqOf(batch);
        seen.push(s);
        infos.push(info);
        if (poison.has(s)) throw new Error(`poison ${s}`);
      });
      return { seen, infos, sub };
    }

    it('delivers the batches of a partition in publish order, and only that partition', async () => {
      const t = await make(newPrefix());
      for (const s of range(0, 40)) await t.publish(1, seqBatch(s));
      for (const s of range(1000, 1010)) await t.publish(0, seqBatch(s));
      const r1 = await recorder(t, 1, 'order');
      const r0 = await recorder(t, 0, 'order');
      await waitFor(() => r1.seen.length >= 40 && r0.seen.length >= 10, 'all batches');
      expect(r1.seen).toEqual(range(0, 40));
      expect(r0.seen).toEqual(range(1000, 1010));
      expect(r1.infos.every((i) => i.partition === 1)).toBe(true);
      // Batches published while consuming arrive after the earlier ones.
      for (const s of range(40, 60)) await t.publish(1, seqBatch(s));
      await waitFor(() => r1.seen.length >= 60, 'live batches');
      expect(r1.seen).toEqual(range(0, 60));
      await Promise.all([r1.sub.stop(), r0.sub.stop()]);
    });

    it('reports lag as a count of batches waiting behind, when it reports it', async () => {
      const t = await make(newPrefix());
      for (const s of range(0, 20)) await t.publish(0, seqBatch(s));
      const r = await recorder(t, 0, 'lag');
      await waitFor(() => r.seen.length >= 20, 'batches');
      const lags = r.infos.map((i) => i.lag).filter((l): l is number => l !== undefined);
      for (const lag of lags) expect(lag).toBeGreaterThanOrEqual(0);
      if (lags.length === 20) {
        expect(lags[0]).toBeGreaterThan(0);
        expect(lags[0]).toBeLessThanOrEqual(19);
        expect(lags[19]).toBe(0);
      }
      await r.sub.stop();
    });

    it('keeps a group position across stop and re-consume; groups are independent', async () => {
      const prefix = newPrefix();
      const t = await make(prefix);
      // Both groups exist before the first batch: a group created later starts at the oldest
      // batch the stream still retains, which differs between transports.
      const first = await recorder(t, 1, 'keep');
      const other = await recorder(t, 1, 'other');
      for (const s of range(0, 10)) await t.publish(1, seqBatch(s));
      await waitFor(() => first.seen.length >= 10, 'first 10');
      await first.sub.stop();
      for (const s of range(10, 20)) await t.publish(1, seqBatch(s));
      // The next owner may live in another process: use a fresh transport when that is possible.
      const next = target.shared ? await make(prefix) : t;
      const second = await recorder(next, 1, 'keep');
      await waitFor(() => second.seen.length >= 10, 'next 10');
      await next.publish(1, seqBatch(20));
      await waitFor(() => second.seen.includes(20), 'batch 20');
      expect(first.seen).toEqual(range(0, 10));
      expect(second.seen).toEqual(range(10, 21));
      await waitFor(() => other.seen.length >= 21, 'other group');
      expect(other.seen).toEqual(range(0, 21));
      await Promise.all([second.sub.stop(), other.sub.stop()]);
    });

    it('does not let a throwing handler block its partition', async () => {
      const t = await make(newPrefix());
      const r = await recorder(t, 0, 'poison', new Set([2, 3]));
      for (const s of range(0, 10)) await t.publish(0, seqBatch(s));
      await waitFor(() => r.seen.length >= 10, 'batches past the poison');
      expect(r.seen).toEqual(range(0, 10));
      await r.sub.stop();
      // The poison batches were acknowledged: a new consumer of the group does not see them again.
      await t.publish(0, seqBatch(10));
      const again = await recorder(t, 0, 'poison');
      await waitFor(() => again.seen.includes(10), 'batch 10');
      expect(again.seen).toEqual([10]);
      await again.sub.stop();
    });

    it('fans every decision out to every subscriber', async () => {
      const prefix = newPrefix();
      const t = await make(prefix);
      const peer = target.shared ? await make(prefix) : t;
      const inboxes: number[][] = [[], [], []];
      const subs: Subscription[] = [];
      for (const [i, inbox] of inboxes.entries()) {
        subs.push(await (i === 2 ? peer : t).subscribeDecisions((m) => inbox.push(seqOf(m))));
      }
      for (const s of range(0, 5)) await t.broadcast(seqBatch(s));
      await waitFor(() => inboxes.every((b) => b.length >= 5), 'decisions at every subscriber');
      for (const inbox of inboxes) expect([...inbox].sort((a, b) => a - b)).toEqual(range(0, 5));
      // A stopped subscription receives nothing more; the others still do.
      await subs[0]!.stop();
      await t.broadcast(seqBatch(5));
      await waitFor(() => inboxes[1]!.includes(5) && inboxes[2]!.includes(5), 'decision 5');
      expect(inboxes[0]).not.toContain(5);
      await Promise.all(subs.map((s) => s.stop()));
    });

    it('rejects bad partitions, groups and payloads with SLUICE_ERR_STREAM_INVALID', async () => {
      const t = await make(newPrefix());
      const invalid = { code: TransportErrorCodes.INVALID };
      for (const p of [-1, target.partitions, 1.5, Number.NaN]) {
        await expect(t.publish(p, seqBatch(0))).rejects.toMatchObject(invalid);
        await expect(t.consume(p, 'g', async () => {})).rejects.toMatchObject(invalid);
      }
      await expect(t.publish(0, new Uint8Array(0))).rejects.toMatchObject(invalid);
      await expect(t.publish(0, 'text' as unknown as Uint8Array)).rejects.toMatchObject(invalid);
      await expect(t.publish(0, new Uint8Array(64 * 1024 * 1024))).rejects.toMatchObject(invalid);
      await expect(t.consume(0, 'no spaces', async () => {})).rejects.toMatchObject(invalid);
      await expect(t.consume(0, 'x'.repeat(65), async () => {})).rejects.toMatchObject(invalid);
      await expect(t.broadcast(new Uint8Array(0))).rejects.toMatchObject(invalid);
    });

    it('closes idempotently, rejects calls after close and leaves no handles', async () => {
      // Earlier tests' transports close first, so their sockets cannot blur the count.
      await Promise.all(open.splice(0).map((t) => t.close()));
      const before = await settledHandleCounts();
      const t = await target.make(newPrefix());
      await t.publish(0, seqBatch(0));
      const r = await recorder(t, 0, 'closing');
      await t.subscribeDecisions(() => {});
      await waitFor(() => r.seen.length >= 1, 'one batch');
      await Promise.all([t.close(), t.close()]);
      await t.close();
      const closed = { code: TransportErrorCodes.CLOSED };
      await expect(t.publish(0, seqBatch(1))).rejects.toMatchObject(closed);
      await expect(t.consume(0, 'g', async () => {})).rejects.toMatchObject(closed);
      await expect(t.broadcast(seqBatch(1))).rejects.toMatchObject(closed);
      await expect(t.subscribeDecisions(() => {})).rejects.toMatchObject(closed);
      await r.sub.stop();
      // Sockets close asynchronously after the client let go of them.
      await waitFor(
        () => {
          const now = handleCounts();
          return now.sockets <= before.sockets && now.timers <= before.timers;
        },
        'handles released',
        10_000,
      );
    });

    if (target.makeCuttable) {
      const makeCuttable = target.makeCuttable.bind(target);
      it('rejects publish in bounded time while the server is away, and recovers when it returns', async () => {
        const c = await makeCuttable(newPrefix());
        try {
          const t = c.transport;
          const r = await recorder(t, 0, 'outage');
          await t.publish(0, seqBatch(0));
          await waitFor(() => r.seen.includes(0), 'batch before the outage');
          await c.down();
          await expect(t.publish(0, seqBatch(1))).rejects.toMatchObject({ code: TransportErrorCodes.UNAVAILABLE });
          await expect(t.broadcast(seqBatch(1))).rejects.toMatchObject({ code: TransportErrorCodes.UNAVAILABLE });
          await c.up();
          let published = false;
          for (let attempt = 0; attempt < 60 && !published; attempt++) {
            try {
              await t.publish(0, seqBatch(2));
              published = true;
            } catch (err) {
              expect(err).toMatchObject({ code: TransportErrorCodes.UNAVAILABLE });
              await new Promise((res) => setTimeout(res, 500));
            }
          }
          expect(published).toBe(true);
          await waitFor(() => r.seen.includes(2), 'batch after recovery', 45_000);
          await r.sub.stop();
        } finally {
          await c.transport.close();
          await c.dispose();
        }
      });

      it('closes while the server is away, stopping consumers and subscriptions', async () => {
        const c = await makeCuttable(newPrefix());
        try {
          const t = c.transport;
          const r = await recorder(t, 1, 'outage');
          await t.subscribeDecisions(() => {});
          await t.publish(1, seqBatch(0));
          await waitFor(() => r.seen.includes(0), 'batch before the outage');
          await c.down();
          // Resolves (the test's timeout is the bound) although no server answers.
          await t.close();
          await expect(t.publish(1, seqBatch(1))).rejects.toMatchObject({ code: TransportErrorCodes.CLOSED });
        } finally {
          await c.dispose();
        }
      });
    }
  });
}
