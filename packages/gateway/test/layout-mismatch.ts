/**
 * Gateways and an aggregator that split the stream into different numbers of partitions, on a
 * real broker: the gateways publish on 8 partitions, the aggregator reads 4. Nothing may be
 * silent about it: the aggregator reports the batches it reads from gateways of another layout
 * (stats, a log line naming both counts, its metric) and counts them all the same, so the
 * resource whose events reach its partitions is still blocked; the gateways report the
 * aggregator's announcements of another layout (stats, their metric).
 */
import { Registry } from 'prom-client';
import { Aggregator, RedisOwnershipStore } from '@sluice/governance';
import { registerAggregatorMetrics } from '@sluice/governance/metrics';
import { compileRules } from '@sluice/rules';
import { EventOutcome, hashValue, partitionOf, type EventTransport } from '@sluice/stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../../test/wait-for.js';
import { Gateway } from '../src/index.js';
import { createGatewayMetrics } from '../src/metrics.js';

/** What one broker provides the suite. */
export interface LayoutSetup {
  /** A transport on the suite's stream with `partitions` partitions. */
  transport(partitions: number): EventTransport;
  /** Where the aggregator's ownership store lives. */
  redisUrl: string;
  /** Key prefix of the run (the ownership store's too). */
  prefix: string;
  /** Deletes what the run left on the servers. */
  cleanup(): Promise<void>;
}

const RULES = `
governance:
  rules:
    search-burst:
      type: threshold
      dimension: path
      match: { path: /search }
      limit: 20
      windowMs: 2000
      blockMs: 5000
`;

/** The first resource name `r<i>` whose events go to a partition in `range` out of 8. */
function resourceOn(range: (partition: number) => boolean): { name: string; hash: number } {
  for (let i = 0; ; i++) {
    const hash = hashValue(`r${i}`);
    if (range(partitionOf(hash, 8))) return { name: `r${i}`, hash };
  }
}

export function layoutMismatchSuite(name: string, setup: () => Promise<LayoutSetup>): void {
  describe(`gateways on 8 partitions, an aggregator on 4, over ${name}`, () => {
    let s: LayoutSetup;
    let aggregator: Aggregator;
    let ownership: RedisOwnershipStore;
    const gateways: Gateway[] = [];
    const transports: EventTransport[] = [];
    const lines: { obj: Record<string, unknown>; msg: string }[] = [];
    const aggregatorMetrics = new Registry();
    const gatewayMetrics = new Registry();

    beforeAll(async () => {
      s = await setup();
      ownership = new RedisOwnershipStore({ url: s.redisUrl, prefix: `${s.prefix}:own:` });
      const aggregatorSide = s.transport(4);
      transports.push(aggregatorSide);
      aggregator = new Aggregator({
        transport: aggregatorSide,
        rules: compileRules(RULES, { file: 'rules.yaml' }).governance,
        ownership,
        announceMs: 200,
        snapshotMs: 0,
        logger: { info: () => undefined, warn: (obj, msg) => void lines.push({ obj: obj as Record<string, unknown>, msg }) },
      });
      registerAggregatorMetrics(aggregator, { registry: aggregatorMetrics });
      await aggregator.start();
      for (let i = 0; i < 2; i++) {
        const t = s.transport(8);
        transports.push(t);
        const gateway = new Gateway({
          transport: t,
          probe: { flushIntervalMs: 5 },
          ...(i === 0 ? { observer: createGatewayMetrics({ registry: gatewayMetrics }) } : {}),
        });
        await gateway.start();
        gateways.push(gateway);
      }
    });

    afterAll(async () => {
      for (const g of gateways) await g.close();
      await aggregator?.close();
      await ownership?.close();
      for (const t of transports) await t.close();
      await s?.cleanup();
    });

    it('is reported by the aggregator and the gateways, and what reaches the aggregator is still counted', async () => {
      // One resource whose events land on a partition the aggregator reads (0..3 of 8 is the
      // same partition of 4), one on a partition it does not (4..7).
      const read = resourceOn((p) => p < 4);
      const unread = resourceOn((p) => p >= 4);
      const search = hashValue('/search');
      const burst = () => {
        for (const g of gateways) {
          for (let i = 0; i < 10; i++) {
            g.probe!.emit(read.hash, search, 0, 0, 0, 200, EventOutcome.PASSED);
            g.probe!.emit(unread.hash, hashValue('/other'), 0, 0, 0, 200, EventOutcome.PASSED);
          }
        }
      };
      // Until every gateway holds the block of /search (the events of `read` suffice for it).
      await waitFor(
        () => {
          burst();
          return gateways.every((g) => g.cache.lookup('path', search) !== undefined);
        },
        'a block of /search on every gateway',
        60_000,
      );

      // The aggregator: stats, a log line naming both counts and what it does, its metric.
      const stats = aggregator.stats();
      expect(stats.layout).toEqual({ partitions: 4, version: 1 });
      expect(stats.layoutMismatchedBatches).toBeGreaterThan(0);
      expect(stats.lastLayoutMismatch).toMatchObject({ source: 'batch', partitions: 8, layoutVersion: 1 });
      expect(stats.events).toBeGreaterThan(0);
      const line = lines.find((l) => l.msg.startsWith('partition layout mismatch'));
      expect(line?.msg).toMatch(
        /a gateway splits the stream into 8 partitions \(layout 1\), this aggregator into 4 \(layout 1\)/,
      );
      expect(line?.msg).toMatch(/partitions 4\.\.7 is read by no aggregator of 4/);
      expect(line?.msg).toMatch(/counted all the same/);
      const aggregatorText = await aggregatorMetrics.metrics();
      const batches = /^sluice_aggregator_layout_mismatches_total\{source="batch"\} (\d+)$/m.exec(aggregatorText);
      expect(Number(batches?.[1])).toBeGreaterThan(0);
      expect(aggregatorText).toContain('sluice_aggregator_partitions 4');

      // The gateways: the aggregator's announcements say 4 partitions.
      await waitFor(() => gateways.every((g) => g.probe!.stats.layoutMismatches > 0), 'an announcement on every gateway', 30_000);
      for (const g of gateways) {
        expect(g.probe!.stats.lastMismatch).toEqual({ aggregator: aggregator.id, partitions: 4, layoutVersion: 1 });
        expect(g.cache.stats.malformed).toBe(0);
      }
      expect(await gatewayMetrics.metrics()).toMatch(/^sluice_gateway_layout_mismatches_total [1-9]\d*$/m);
    });
  });
}
