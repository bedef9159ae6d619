import { afterEach, describe, expect, it, vi } from 'vitest';
import { PartitionOwnership } from './coordinator.js';
import { MemoryOwnershipStore, type OwnershipStore } from './store.js';

const owners: PartitionOwnership[] = [];
afterEach(async () => {
  for (const o of owners.splice(0)) await o.close();
});

function owner(store: OwnershipStore, id: string, log: string[], partitions = 4, now?: () => number): PartitionOwnership {
  const o = new PartitionOwnership(
    { store, partitions, owner: id, ttlMs: 3000, renewMs: 1_000_000, now },
    {
      acquired: (p) => {
        log.push(`${id}+${p}`);
        return Promise.resolve();
      },
      released: (p, voluntary) => {
        log.push(`${id}-${p}${voluntary ? '' : '!'}`);
        return Promise.resolve();
      },
    },
  );
  owners.push(o);
  return o;
}

describe('PartitionOwnership', () => {
  it('shares the partitions fairly and never gives one partition to two owners', async () => {
    let now = 0;
    const store = new MemoryOwnershipStore({ now: () => now });
    const log: string[] = [];
    const a = owner(store, 'a', log);
    await a.round();
    expect(a.owned).toEqual([0, 1, 2, 3]);
    const b = owner(store, 'b', log);
    await b.round(); // b is live now, but every partition is taken
    expect(b.owned).toEqual([]);
    now += 1000;
    await a.round(); // a sees two members and gives up half
    await b.round();
    expect(a.owned.length).toBe(2);
    expect(b.owned.length).toBe(2);
    expect([...a.owned, ...b.owned].sort()).toEqual([0, 1, 2, 3]);
    for (let p = 0; p < 4; p++) expect(store.holder(p)).toBe(a.owned.includes(p) ? 'a' : 'b');
  });

  it("takes a dead owner's partitions over once their ownership lapses", async () => {
    let now = 0;
    const store = new MemoryOwnershipStore({ now: () => now });
    const log: string[] = [];
    const a = owner(store, 'a', log);
    const b = owner(store, 'b', log);
    await a.round();
    await b.round();
    now += 1000;
    await a.round();
    await b.round();
    const fromA = a.owned;
    expect(fromA.length).toBe(2);
    // a dies: it stops renewing. Before the TTL nothing moves; after it, b owns everything.
    now += 1500;
    await b.round();
    expect(b.owned.length).toBe(2);
    now += 2000;
    await b.round();
    expect(b.owned).toEqual([0, 1, 2, 3]);
    // a comes back from a pause: its renewals fail and it drops its state.
    await a.round();
    expect(a.owned).toEqual([]);
    expect(log.filter((l) => l.endsWith('!')).sort()).toEqual(fromA.map((p) => `a-${p}!`).sort());
  });

  it('gives every partition up on close', async () => {
    const store = new MemoryOwnershipStore();
    const log: string[] = [];
    const a = owner(store, 'a', log, 2);
    await a.round();
    await a.close();
    expect(log.slice(0, 2).sort()).toEqual(['a+0', 'a+1']);
    expect(log.slice(2)).toEqual(['a-0', 'a-1']);
    expect(store.holder(0)).toBeUndefined();
    expect(await store.heartbeat('probe', 1000)).toBe(1);
  });

  it('keeps consuming while the ownership store is down, until its ownership would have lapsed', async () => {
    let now = 0;
    const memory = new MemoryOwnershipStore({ now: () => now });
    let down = false;
    const failing = new Proxy(memory, {
      get(target, prop, receiver) {
        const value: unknown = Reflect.get(target, prop, receiver);
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) =>
          down ? Promise.reject(new Error('store down')) : (value as (...a: unknown[]) => unknown).apply(target, args);
      },
    });
    const log: string[] = [];
    const a = owner(failing, 'a', log, 2, () => now);
    await a.round();
    expect(a.owned).toEqual([0, 1]);
    down = true;
    now += 2000;
    await a.round();
    expect(a.owned).toEqual([0, 1]);
    now += 1500;
    await a.round();
    expect(a.owned).toEqual([]);
    expect(log.slice(2).sort()).toEqual(['a-0!', 'a-1!']);
    down = false;
  });

  it('keeps renewing its partitions while a partition is slow to start', async () => {
    class CountingStore extends MemoryOwnershipStore {
      renewals = new Map<number, number>();
      override renew(partition: number, owner: string, ttlMs: number): Promise<boolean> {
        this.renewals.set(partition, (this.renewals.get(partition) ?? 0) + 1);
        return super.renew(partition, owner, ttlMs);
      }
    }
    const store = new CountingStore();
    let startSlow: () => void = () => {};
    const slow = new Promise<void>((resolve) => (startSlow = resolve));
    const o = new PartitionOwnership(
      { store, partitions: 2, owner: 'a', ttlMs: 3000, renewMs: 5 },
      {
        // Partition 1 takes as long as the test wants to start (a broker client's start-up).
        acquired: (p) => (p === 1 ? slow : Promise.resolve()),
        released: () => Promise.resolve(),
      },
    );
    owners.push(o);
    const first = o.start();
    try {
      // The ownership of the partition that is starting is renewed meanwhile, again and again.
      await vi.waitFor(() => expect(store.renewals.get(1) ?? 0).toBeGreaterThanOrEqual(3), { timeout: 4000 });
      expect(o.owned).toContain(1);
    } finally {
      startSlow();
    }
    await first;
  });

  it('gives a partition back when it cannot start consuming it', async () => {
    const store = new MemoryOwnershipStore();
    const errors: unknown[] = [];
    let failing = true;
    const o = new PartitionOwnership(
      { store, partitions: 1, owner: 'a', ttlMs: 3000, renewMs: 1_000_000, onError: (e) => errors.push(e) },
      {
        acquired: () => (failing ? Promise.reject(new Error('stream down')) : Promise.resolve()),
        released: () => Promise.resolve(),
      },
    );
    owners.push(o);
    await o.round();
    expect(o.owned).toEqual([]);
    expect(store.holder(0)).toBeUndefined();
    expect(errors.length).toBe(1);
    failing = false;
    await o.round();
    expect(o.owned).toEqual([0]);
  });

  describe('hands one partition over at a time', () => {
    /** A handler that runs until the test lets it finish, logging its start and end. */
    function gate() {
      let open: () => void = () => {};
      const done = new Promise<void>((resolve) => (open = resolve));
      return { done, open };
    }
    const settle = () => new Promise((r) => setTimeout(r, 0));

    it('takes a lost partition back only after its consumer stopped', async () => {
      const store = new MemoryOwnershipStore();
      const log: string[] = [];
      let stopping = gate();
      let active = 0;
      const o = new PartitionOwnership(
        { store, partitions: 1, owner: 'a', ttlMs: 3000, renewMs: 1_000_000 },
        {
          acquired: async () => {
            expect(active++).toBe(0);
            log.push('+');
          },
          released: async (_p, voluntary) => {
            log.push(voluntary ? '-' : '-!');
            await stopping.done;
            log.push('stopped');
            expect(--active).toBe(0);
          },
        },
      );
      owners.push(o);
      await o.round();
      expect(o.owned).toEqual([0]);
      // The ownership lapsed (a stall past the TTL) and nobody took it: it is free again.
      await store.release(0, 'a');
      await o.round();
      expect(o.owned).toEqual([]);
      await o.round();
      // The old consumer is still stopping: the free partition is not taken again yet.
      expect(o.owned).toEqual([]);
      expect(log).toEqual(['+', '-!']);
      stopping.open();
      await settle();
      await o.round();
      expect(o.owned).toEqual([0]);
      expect(log).toEqual(['+', '-!', 'stopped', '+']);
      // close() gives the partition up again: that consumer stops at once.
      stopping = gate();
      stopping.open();
    });

    it('lets a partition go only after its consumer started, when its ownership is lost meanwhile', async () => {
      const store = new MemoryOwnershipStore();
      const log: string[] = [];
      const starting = gate();
      const o = new PartitionOwnership(
        { store, partitions: 1, owner: 'a', ttlMs: 3000, renewMs: 1_000_000 },
        {
          acquired: async () => {
            log.push('+');
            await starting.done;
            log.push('started');
          },
          released: async (_p, voluntary) => {
            log.push(voluntary ? '-' : '-!');
          },
        },
      );
      owners.push(o);
      const first = o.round();
      await vi.waitFor(() => expect(log).toEqual(['+']));
      await store.release(0, 'a');
      // The renewal finds the ownership gone while the consumer is still starting (the balance
      // round of this call waits for the one in flight).
      const second = o.round();
      await vi.waitFor(() => expect(o.owned).toEqual([]));
      await settle();
      expect(log).toEqual(['+']);
      starting.open();
      await Promise.all([first, second]);
      await settle();
      expect(log).toEqual(['+', 'started', '-!']);
    });
  });
});
