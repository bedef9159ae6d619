import { describe, expect, it } from 'vitest';
import { TurnBatch } from './turn-batch.js';

describe('TurnBatch', () => {
  it('starts the calls of one turn together, after the turn, in order', async () => {
    const batch = new TurnBatch();
    const started: number[] = [];
    const call = (n: number) => () => {
      started.push(n);
      return Promise.resolve(n);
    };
    const all = [batch.defer(call(1)), batch.defer(call(2)), batch.defer(call(3))];
    // Nothing has started within the turn that asked.
    expect(started).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(started).toEqual([1, 2, 3]);
    expect(await Promise.all(all)).toEqual([1, 2, 3]);
  });

  it('settles each call as it settles, a synchronous throw included', async () => {
    const batch = new TurnBatch();
    const failing = batch.defer(() => Promise.reject(new Error('no')));
    const throwing = batch.defer((): Promise<number> => {
      throw new Error('sync');
    });
    const fine = batch.defer(() => Promise.resolve('ok'));
    await expect(failing).rejects.toThrow('no');
    await expect(throwing).rejects.toThrow('sync');
    expect(await fine).toBe('ok');
  });

  it('starts calls asked for while a batch runs with the next batch', async () => {
    const batch = new TurnBatch();
    const started: string[] = [];
    const inner = new Promise<void>((resolve) => {
      void batch.defer(() => {
        started.push('outer');
        void batch.defer(() => {
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
});
