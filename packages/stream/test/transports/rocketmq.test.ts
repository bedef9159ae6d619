import { RocketMqTransport } from '@sluice/stream/rocketmq';
import { afterAll, describe, expect, it } from 'vitest';
import { createRocketMqGroups } from '../../../../test/env.js';
import { waitFor } from '../../../../test/wait-for.js';
import { range, runTransportConformance, seqBatch, seqOf } from './conformance.js';
import { rocketMqEndpoints, rocketMqProxyPid } from './env.js';

const endpoints = rocketMqEndpoints();
// The groups the suite consumes with, bound to the LITE parent topic.
createRocketMqGroups(['order', 'lag', 'keep', 'other', 'poison', 'outage', 'closing', 'handover']);

for (const mode of ['lite', 'topics'] as const) {
  runTransportConformance({
    name: `rocketmq (${mode})`,
    partitions: 4,
    shared: true,
    make: async (prefix) => new RocketMqTransport({ mode, partitions: 4, endpoints, prefix, awaitMs: 1_000 }),
    // The proxy hands clients its own address in topic routes, so a forwarder in between cannot
    // cut the connection: the drill freezes the proxy process instead (SIGSTOP, then SIGCONT).
    makeCuttable: async (prefix) => {
      const pid = rocketMqProxyPid();
      const signal = (s: NodeJS.Signals) => Promise.resolve(void process.kill(pid, s));
      const transport = new RocketMqTransport({
        mode,
        partitions: 4,
        endpoints,
        prefix,
        awaitMs: 1_000,
        commandTimeoutMs: 1_000,
      });
      return { transport, down: () => signal('SIGSTOP'), up: () => signal('SIGCONT'), dispose: () => signal('SIGCONT') };
    },
  });
}

describe('RocketMQ decisions through a named subscriber', () => {
  const open: RocketMqTransport[] = [];
  const make = (subscriberId?: string): RocketMqTransport => {
    const prefix = `named-${process.pid}`;
    const t = new RocketMqTransport({
      partitions: 4,
      endpoints,
      prefix,
      awaitMs: 1_000,
      ...(subscriberId ? { subscriberId } : {}),
    });
    open.push(t);
    return t;
  };
  afterAll(async () => {
    await Promise.all(open.map((t) => t.close()));
  });

  it('takes its group up again after a restart, without the decisions sent while it was away', async () => {
    const id = `gw-${Date.now().toString(36)}`;
    const sender = make();
    const seen = async (sent: number, inbox: number[]): Promise<void> => {
      await sender.broadcast(new Uint8Array([sent]));
      await waitFor(() => inbox.includes(sent), `decision ${sent}`);
    };
    const first: number[] = [];
    const before = make(id);
    await before.subscribeDecisions((m) => first.push(m[0]!));
    await seen(1, first);
    await before.close();
    await sender.broadcast(new Uint8Array([2]));
    const second: number[] = [];
    const after = make(id);
    await after.subscribeDecisions((m) => second.push(m[0]!));
    await seen(3, second);
    expect(first).toEqual([1]);
    expect(second).toEqual([3]);
  });
});

describe('RocketMQ lite topics across an owner change', () => {
  const open: RocketMqTransport[] = [];
  let seq = 0;
  const pair = (): [RocketMqTransport, RocketMqTransport] => {
    const prefix = `ho-${process.pid}-${Date.now().toString(36)}-${seq++}`;
    const made = [0, 1].map(() => new RocketMqTransport({ partitions: 4, endpoints, prefix, awaitMs: 1_000 }));
    open.push(...made);
    return [made[0]!, made[1]!];
  };
  afterAll(async () => {
    await Promise.all(open.map((t) => t.close()));
  });

  it('continues in order where a stopped owner left off, without repeats', async () => {
    const [a, b] = pair();
    for (const s of range(0, 60)) await a.publish(0, seqBatch(s));
    const first: number[] = [];
    const sub = await a.consume(0, 'handover', async (batch) => {
      first.push(seqOf(batch));
      await new Promise((r) => setTimeout(r, 5));
    });
    await waitFor(() => first.length >= 10, 'the first owner to read 10', 60_000);
    // Stopped in the middle of what one receive brought: the rest is handed back.
    await sub.stop();
    const next: number[] = [];
    const subB = await b.consume(0, 'handover', async (batch) => void next.push(seqOf(batch)));
    await waitFor(() => first.length + next.length >= 60, 'every batch', 60_000);
    expect([...first, ...next]).toEqual(range(0, 60));
    await subB.stop();
  });

  it('lets a new owner take a lite topic over from one that never let go', async () => {
    const [a, b] = pair();
    const first: number[] = [];
    await a.consume(1, 'handover', async (batch) => void first.push(seqOf(batch)));
    for (const s of range(0, 10)) await a.publish(1, seqBatch(s));
    await waitFor(() => first.length === 10, 'the first owner to read 10', 60_000);
    // The first owner is not stopped (stalled, or killed and not yet noticed by the proxy).
    const next: number[] = [];
    const subB = await b.consume(1, 'handover', async (batch) => void next.push(seqOf(batch)));
    for (const s of range(10, 20)) await b.publish(1, seqBatch(s));
    await waitFor(() => next.length === 10, 'the new owner to read 10', 60_000);
    expect(next).toEqual(range(10, 20));
    expect(first).toEqual(range(0, 10));
    await subB.stop();
  });
});
