/**
 * A sustained burst against a gateway fleet, run on every transport (RocketMQ also runs the
 * larger shape of sustained-burst-fleet.rocketmq.test.ts, with gateway processes, by hand): three
 * gateways (real node:http servers, each with its own connection to the stream) and one
 * aggregator; a rule
 * blocks /search above 20 requests in 2 s for 1.5 s; the load generator sends ~150 requests a
 * second to /search for 5 s (more than 3x the block time), spread over the gateways.
 *
 * It checks what holds: once a gateway has rejected a request to /search, no later request to
 * /search passes there until the burst ends (the rejected requests, counted per block, keep the
 * block in force); and the lift reaches every gateway within the documented bound after the
 * burst ends (windowMs + tickMs at the aggregator, plus the stream's delivery, bounded
 * generously here because the machine is shared: the exact bound is checked on the manual
 * clock in the aggregator's unit tests).
 */
import { createServer, Agent, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { compileRules } from '@sluice/rules';
import { Aggregator, MemoryOwnershipStore } from '@sluice/governance';
import { hashValue, type EventTransport } from '@sluice/stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Gateway } from '../src/index.js';

/** How one transport is set up: a transport for each side, and the clean-up. */
export interface BurstSetup {
  /** A transport for gateway `i` (0..2) or for the aggregator (`'aggregator'`). */
  transport(role: number | 'aggregator'): EventTransport;
  /** Closes what `transport` made and removes the test's streams. */
  close(): Promise<void>;
}

/** How the suite runs on one transport. */
export interface BurstOptions {
  /** Bound on the stream's delivery of a decision (beyond the aggregator's own bound). @default 10000 */
  readonly deliverySlackMs?: number;
  /** Bound on the wait for the aggregator to read its first events. @default 45000 */
  readonly warmupMs?: number;
}

// A 2 s window, and a limit far below the offered load: a tally delivered late, or a load
// generator slowed down, by a busy machine still leaves the window well over the limit.
const LIMIT = 20;
const WINDOW_MS = 2000;
const BLOCK_MS = 1500;
const TICK_MS = 100;
const BURST_MS = 5000;
/** Requests a second to each gateway (150 in all), sent every 20 ms as due by the clock. */
const RATE = 50;
const PERIOD_MS = 20;

const RULES = `
governance:
  rules:
    search-flood:
      type: threshold
      dimension: path
      match: { path: /search }
      limit: ${LIMIT}
      windowMs: ${WINDOW_MS}
      blockMs: ${BLOCK_MS}
`;

interface Sample {
  readonly sentAt: number;
  doneAt: number;
  status: number;
}

const agent = new Agent({ keepAlive: true, maxSockets: 32 });

function get(port: number, path: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, agent }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', () => resolve(0));
    });
    req.on('error', () => resolve(0));
    req.end();
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what} after ${timeoutMs} ms`);
    await sleep(50);
  }
}

/** Registers the suite for one transport. */
export function sustainedBurstSuite(name: string, setup: () => Promise<BurstSetup>, options: BurstOptions = {}): void {
  const slackMs = options.deliverySlackMs ?? 10_000;
  const warmupMs = options.warmupMs ?? 45_000;
  describe(`a sustained burst over ${name}`, () => {
    let s: BurstSetup;
    let aggregator: Aggregator;
    const gateways: Gateway[] = [];
    const servers: Server[] = [];
    const ports: number[] = [];

    beforeAll(async () => {
      s = await setup();
      aggregator = new Aggregator({
        transport: s.transport('aggregator'),
        rules: compileRules(RULES, { file: 'rules.yaml' }).governance,
        ownership: new MemoryOwnershipStore(),
        tickMs: TICK_MS,
        refreshMs: 500,
        ttlMs: 5000,
        snapshotMs: 0,
      });
      await aggregator.start();
      for (let i = 0; i < 3; i++) {
        const gateway = new Gateway({ transport: s.transport(i) });
        await gateway.start();
        const server = createServer(gateway.wrap((_req, res) => void res.end('ok')));
        await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
        gateways.push(gateway);
        servers.push(server);
        ports.push((server.address() as AddressInfo).port);
      }
      // The aggregator reads /search (4 requests a second, far below the limit)...
      let turn = 0;
      await until(
        'the aggregator to read events',
        async () => {
          await get(ports[turn++ % ports.length]!, '/search');
          await sleep(200);
          return aggregator.stats().events > 0 ? true : undefined;
        },
        warmupMs,
      );
      // ...and the window it filled drains before the burst.
      await sleep(WINDOW_MS + 500);
    }, warmupMs + 30_000);

    afterAll(async () => {
      for (const server of servers) {
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
      }
      for (const g of gateways) await g.close();
      await aggregator?.close();
      await s?.close();
    });

    it(
      'keeps /search blocked on every gateway from the first rejection until the burst ends, then lifts it',
      async () => {
        const path = hashValue('/search');
        expect(gateways.map((g) => g.cache.lookup('path', path))).toEqual([undefined, undefined, undefined]);
        const samples: Sample[][] = ports.map(() => []);
        const pending: Promise<void>[] = [];
        const start = Date.now();
        let rounds = 0;
        for (let now = start; now - start < BURST_MS; now = Date.now()) {
          // Paced by the clock: a timer that fires late sends what has come due (a few rounds at most).
          const due = Math.min(5, Math.floor(((now - start) * RATE) / 1000) + 1 - rounds);
          for (let k = 0; k < due; k++, rounds++) {
            for (let i = 0; i < ports.length; i++) {
              const sample: Sample = { sentAt: Date.now(), doneAt: 0, status: 0 };
              samples[i]!.push(sample);
              pending.push(
                get(ports[i]!, '/search').then((status) => {
                  sample.doneAt = Date.now();
                  sample.status = status;
                }),
              );
            }
          }
          await sleep(PERIOD_MS);
        }
        const burstEnd = Date.now();
        await Promise.all(pending);

        const report = samples.map((list) => {
          const firstBlock = list.filter((x) => x.status === 429).reduce((m, x) => Math.min(m, x.doneAt), Infinity);
          return {
            sent: list.length,
            passed: list.filter((x) => x.status === 200).length,
            rejected: list.filter((x) => x.status === 429).length,
            passedAfterBlock: list.filter((x) => x.sentAt > firstBlock && x.status === 200).length,
            blockedAfterMs: firstBlock - start,
          };
        });
        const detail = JSON.stringify({ report, aggregator: aggregator.stats(), probes: gateways.map((g) => g.probe?.stats) });
        for (const r of report) {
          // The block reached every gateway during the burst...
          expect(r.blockedAfterMs, detail).toBeLessThan(BURST_MS);
          // ...and from then on nothing passed there.
          expect(r.passedAfterBlock, detail).toBe(0);
          expect(r.sent, detail).toBe(r.passed + r.rejected);
        }
        // The aggregator counted the rejections: that is what kept the block.
        expect(aggregator.stats().rejected, detail).toBeGreaterThan(0);
        expect(aggregator.stats().malformedBatches, detail).toBe(0);

        // The burst is over: the lift reaches every gateway within the bound.
        const liftedAt = await until(
          'every gateway to receive the lift',
          () => (gateways.every((g) => g.cache.stats.lifts >= 1) ? Date.now() : undefined),
          WINDOW_MS + TICK_MS + slackMs,
        );
        expect(liftedAt - burstEnd).toBeLessThanOrEqual(WINDOW_MS + TICK_MS + slackMs);
        expect(await Promise.all(ports.map((p) => get(p, '/search')))).toEqual([200, 200, 200]);
      },
      BURST_MS + WINDOW_MS + slackMs + 30_000,
    );
  });
}
