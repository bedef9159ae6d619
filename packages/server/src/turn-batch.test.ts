import { describe, expect, it } from 'vitest';
import { TurnBatch } from './turn-batch.js';

const turn = () => new Promise((r) => setImmediate(r));

describe('TurnBatch', () => {
  it('starts the calls of one turn together, after the turn, in order', async () => {
    const batch = new TurnBatch();
    const started: number[] = [];
    const call = (n: number) => () => {
      started.push(n);
      return Promise.resolve(n);
    };
    const all = [batch.defer('c', call(1)), batch.defer('c', call(2)), batch.defer('c', call(3))];
    // Nothing has started within the turn that asked.
    expect(started).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(started).toEqual([1, 2, 3]);
    expect(await Promise.all(all)).toEqual([1, 2, 3]);
  });

  it('settles each call as it settles, a synchronous throw included', async () => {
    const batch = new TurnBatch();
    const failing = batch.defer('c', () => Promise.reject(new Error('no')));
    const throwing = batch.defer('c', (): Promise<number> => {
      throw new Error('sync');
    });
    const fine = batch.defer('c', () => Promise.resolve('ok'));
    await expect(failing).rejects.toThrow('no');
    await expect(throwing).rejects.toThrow('sync');
    expect(await fine).toBe('ok');
  });

  it('starts calls asked for while a batch runs with the next batch', async () => {
    const batch = new TurnBatch();
    const started: string[] = [];
    const inner = new Promise<void>((resolve) => {
      void batch.defer('c', () => {
        started.push('outer');
        void batch.defer('c', () => {
          started.push('inner');
          resolve();
          return Promise.resolve();
        });
        expect(started).toEqual(['outer']);
        return Promise.resolve();
      });
    });
    await inner;
    expect(started).toEqual(['outer', 'inner']);
  });

  it('shares each turn by client: one call each in turn, at most perTurn, the rest in the next turns', async () => {
    const batch = new TurnBatch({ perTurn: 4 });
    const started: string[] = [];
    const call = (name: string) => () => {
      started.push(name);
      return Promise.resolve(name);
    };
    const flood = Array.from({ length: 6 }, (_, i) => batch.defer('flood', call(`f${i}`)));
    const other = [batch.defer('other', call('o0')), batch.defer('other', call('o1'))];
    await turn();
    expect(started).toEqual(['f0', 'o0', 'f1', 'o1']);
    expect(batch.size).toBe(4);
    await turn();
    expect(started).toEqual(['f0', 'o0', 'f1', 'o1', 'f2', 'f3', 'f4', 'f5']);
    expect((await Promise.all([...flood, ...other])).length).toBe(8);
  });

  it("refuses a client's calls beyond maxClientQueued with SLUICE_ERR_CLIENT_BUSY, not another client's", async () => {
    const batch = new TurnBatch({ maxClientQueued: 2 });
    const ok = [batch.defer('a', () => Promise.resolve(1)), batch.defer('a', () => Promise.resolve(2))];
    let ran = false;
    const refused = batch.defer('a', () => {
      ran = true;
      return Promise.resolve(3);
    });
    await expect(refused).rejects.toMatchObject({ code: 'SLUICE_ERR_CLIENT_BUSY' });
    expect(await batch.defer('b', () => Promise.resolve('b'))).toBe('b');
    expect(await Promise.all(ok)).toEqual([1, 2]);
    expect(ran).toBe(false);
    // Started calls free their places.
    expect(await batch.defer('a', () => Promise.resolve(4))).toBe(4);
  });

  it('holds back a client with maxClientInFlight calls unsettled (its store round trip) and serves the others, not its waits', async () => {
    const batch = new TurnBatch({ maxClientInFlight: 2 });
    const started: string[] = [];
    const pending: (() => void)[] = [];
    const held = (name: string) => () => {
      started.push(name);
      return new Promise<string>((resolve) => pending.push(() => resolve(name)));
    };
    const flood = [1, 2, 3].map((i) => batch.defer('flood', held(`f${i}`)));
    const wait = batch.defer('flood', held('wait'), true);
    const other = batch.defer('other', held('o1'));
    await turn();
    expect(started).toEqual(['f1', 'o1', 'f2']);
    await turn();
    expect(started).toEqual(['f1', 'o1', 'f2']);
    pending.shift()!();
    await flood[0];
    await turn();
    // The wait does not count against the bound: both start.
    expect(started).toEqual(['f1', 'o1', 'f2', 'f3', 'wait']);
    for (const p of pending.splice(0)) p();
    expect(await Promise.all([...flood, wait, other])).toEqual(['f1', 'f2', 'f3', 'wait', 'o1']);
  });
});
