import { compileRules, type RuleListener, type RuleStore, type RuleVersion } from '@sluice/rules';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { EventOutcome, MemoryTransport, encodeEvents, hashValue } from '@sluice/stream';
import { MemoryOwnershipStore } from '../ownership/store.js';
import { Aggregator } from './aggregator.js';

const T0 = 1_700_000_000_000;
const RULES = `
governance:
  rules:
    search-burst:
      type: threshold
      dimension: path
      limit: 20
      blockMs: 2000
`;

function version(n: number, text: string): RuleVersion {
  const ruleSet = compileRules(text, { file: 'rules.yaml' });
  return { version: n, author: 't', reason: 't', createdAt: '', hash: ruleSet.hash, file: 'rules.yaml', source: text, ruleSet };
}

/** An ownership store whose snapshot reads wait until the test lets them answer. */
class SlowSnapshots extends MemoryOwnershipStore {
  reads = 0;
  #open: () => void = () => {};
  readonly #gate = new Promise<void>((resolve) => (this.#open = resolve));

  open(): void {
    this.#open();
  }

  override async loadSnapshot(partition: number): Promise<Uint8Array | undefined> {
    this.reads++;
    await this.#gate;
    return super.loadSnapshot(partition);
  }
}

const closing: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closing.splice(0)) await c();
});

describe('Aggregator taking a partition', () => {
  it('counts with the rules in force when the partition is ready, not those when it was taken', async () => {
    const now = T0;
    const transport = new MemoryTransport({ partitions: 1 });
    const owners = new SlowSnapshots({ now: () => now });
    let listener: RuleListener | undefined;
    const store = {
      watch: (l: RuleListener) => ((listener = l), () => (listener = undefined)),
      current: () => Promise.resolve(undefined),
    };
    const a = new Aggregator({
      transport,
      rules: store as unknown as RuleStore,
      ownership: owners,
      tickMs: 60_000,
      snapshotMs: 0,
      now: () => now,
    });
    closing.push(
      () => a.close(),
      () => transport.close(),
    );
    // The partition is taken while the rule store has not delivered its first version yet
    // (a file being read), and the rules arrive while its snapshot is being read.
    const started = a.start();
    await vi.waitFor(() => expect(owners.reads).toBe(1));
    listener!(version(1, RULES));
    owners.open();
    await started;
    expect(a.partitions).toEqual([0]);
    const search = {
      resource: hashValue('api'),
      path: hashValue('/search'),
      user: 0,
      ip: 0,
      tenant: 0,
      status: 200,
      outcome: EventOutcome.PASSED,
      timestampMs: now,
    };
    await transport.publish(0, encodeEvents(Array.from({ length: 21 }, () => search)));
    await vi.waitFor(() => expect(a.stats().batches).toBe(1));
    expect(a.stats().events).toBe(21);
    expect((await a.tick()).map((d) => [d.action, d.ruleId])).toEqual([['block', 'search-burst']]);
  });
});
