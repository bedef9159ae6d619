import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { FileRuleStore } from '../store/file-store.js';
import { RUNNING_ROLLOUT as state } from '../../test/rollout-state.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function stores() {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-rollout-'));
  dirs.push(dir);
  let now = 1000;
  const opts = { dir, now: () => now };
  return {
    dir,
    a: new FileRuleStore(opts).rolloutStore(),
    b: new FileRuleStore(opts).rolloutStore(),
    tick: (ms: number) => (now += ms),
  };
}

describe('FileRolloutStore (a FileRuleStore rollout)', () => {
  it('writes by compare-and-set: the second writer of a revision loses', async () => {
    const { a, b } = stores();
    expect(await a.read()).toBeUndefined();
    const written = await a.write(state, 0);
    expect(written.revision).toBe(1);
    expect(await b.read()).toEqual(written);
    await b.write({ ...written, step: 1 }, 1);
    await expect(a.write({ ...written, status: 'aborted' }, 1)).rejects.toMatchObject({ code: 'SLUICE_ERR_ROLLOUT_CONFLICT' });
    expect((await a.read())!.step).toBe(1);
  });

  it('makes one owner the decider until its leadership runs out', async () => {
    const { a, b, tick } = stores();
    expect(await a.lead('one', 1000)).toBe(true);
    expect(await b.lead('two', 1000)).toBe(false);
    expect(await a.lead('one', 1000)).toBe(true);
    tick(1001);
    expect(await b.lead('two', 1000)).toBe(true);
    await b.resign('two');
    expect(await a.lead('one', 1000)).toBe(true);
  });

  it('sums tallies per rollout and phase', async () => {
    const { a } = stores();
    await a.addTallies('r1', 0, new Map([['baseline|orders|decided', 2]]));
    await a.addTallies('r1', 0, new Map([['baseline|orders|decided', 3]]));
    expect(await a.tallies('r1', 0)).toEqual(new Map([['baseline|orders|decided', 5]]));
    expect(await a.tallies('r1', 1)).toEqual(new Map());
  });

  it('reports a rollout file it cannot read as corrupt', async () => {
    const { dir, a } = stores();
    writeFileSync(join(dir, 'rollout.json'), '{"id": 1}');
    await expect(a.read()).rejects.toMatchObject({ code: 'SLUICE_ERR_RULE_STORE_CORRUPT' });
  });
});
