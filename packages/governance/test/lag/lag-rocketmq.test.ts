/**
 * The RocketMQ transport's lag reaches the aggregator's degradation: a backlog on a lite topic,
 * read 32 batches per receive, reports up to 31 batches behind, and an aggregator told to
 * sample from 5 batches behind samples while it catches up, then reads normally again.
 */
import { Aggregator, MemoryOwnershipStore } from '@sluice/governance';
import { encodeEvents, EventOutcome } from '@sluice/stream';
import { RocketMqTransport } from '@sluice/stream/rocketmq';
import { afterAll, expect, it } from 'vitest';
import { waitFor } from '../../../../test/wait-for.js';
import { rocketMqEndpoints } from '../env.js';

const endpoints = rocketMqEndpoints();
const prefix = `lag-${process.pid}-${Date.now().toString(36)}`;
const open: { close(): Promise<void> }[] = [];

afterAll(async () => {
  for (const o of open.reverse()) await o.close();
});

function batch(i: number): Uint8Array {
  const event = {
    resource: 1,
    path: 2,
    user: i + 1,
    ip: 3,
    tenant: 0,
    timestampMs: Date.now(),
    status: 200,
    outcome: EventOutcome.PASSED,
  };
  return encodeEvents([event]);
}

it('samples a backlog on RocketMQ lite topics by the batches it reports behind, then reads normally', async () => {
  const publisher = new RocketMqTransport({ partitions: 1, endpoints, prefix, awaitMs: 1_000 });
  open.push(publisher);
  // The aggregators' group (scripts/rocketmq-server.sh creates it) starts at the lite topic's
  // first message, so the backlog is read in full.
  for (let i = 0; i < 96; i++) await publisher.publish(0, batch(i));
  const transport = new RocketMqTransport({ partitions: 1, endpoints, prefix, awaitMs: 1_000 });
  open.push(transport);
  const aggregator = new Aggregator({
    transport,
    rules: {},
    ownership: new MemoryOwnershipStore(),
    id: 'lag',
    snapshotMs: 0,
    sampleLagBatches: 5,
    shedLagBatches: 10_000,
  });
  open.push(aggregator);
  await aggregator.start();
  const read = () => aggregator.stats().batches;
  await waitFor(() => read() >= 96, 'the backlog read', 60_000);
  expect(read()).toBe(96);
  const sampled = aggregator.stats().sampledBatches;
  expect(sampled).toBeGreaterThan(0);
  expect(sampled).toBeLessThan(96);
  // Caught up: a new batch arrives with nothing behind it and is read in full.
  await publisher.publish(0, batch(96));
  await waitFor(() => read() >= 97, 'the batch after the backlog', 60_000);
  expect(read()).toBe(97);
  expect(aggregator.stats().sampledBatches).toBe(sampled);
});
