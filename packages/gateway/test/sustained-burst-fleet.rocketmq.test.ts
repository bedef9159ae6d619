/**
 * A sustained burst against a gateway fleet on RocketMQ LiteTopic, in the shape users run it:
 * three gateway processes (node:http behind @sluice/gateway, each on its own RocketMQ transport
 * with its own `subscriberId`), one aggregator, 4 partitions, default transport and aggregator
 * settings; a rule blocks /hot above 200 requests in 1 s for 5 s; 20 requests a second for
 * 2 s, then ~600 a second on /hot for 8 s, spread over the gateways by a load generator
 * process of its own (the aggregator's work in the test's process must not slow the load).
 *
 * It checks what holds: once a gateway has answered its first 429, no later request to /hot
 * passes there until the burst ends; and the lift reaches every gateway within the documented
 * bound after the burst ends (docs/governance.md, "Offered load").
 *
 * Needs SLUICE_ROCKETMQ_ENDPOINTS (scripts/rocketmq-server.sh start) and the built packages
 * (`npm run build`): the gateway processes import them.
 *
 * Run by hand, on a fresh broker, with SLUICE_FLEET_SCENARIOS=1 (27-50 s): on a machine crowded
 * far beyond its cores the gateway processes fall seconds behind their own requests, and the
 * figures then say more about the machine than about the stream (docs/governance.md gives the
 * runs). The in-process shape (sustained-burst.rocketmq.test.ts) runs in every test run.
 */
import { Agent, request } from 'node:http';
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { compileRules } from '@sluice/rules';
import { Aggregator, MemoryOwnershipStore } from '@sluice/governance';
import { RocketMqTransport } from '@sluice/stream/rocketmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, rocketMqEndpoints } from './env.js';

const PARTITIONS = 4;
const LIMIT = 200;
const WINDOW_MS = 1000;
const BLOCK_MS = 5000;
const TICK_MS = 100;
const WARM_MS = 2000;
const BURST_MS = 8000;
/** Requests a second over all gateways, before and during the burst. */
const WARM_RATE = 20;
const BURST_RATE = 600;
/** The stream's delivery of the last tallies and of the lift, bounded generously (shared machine). */
const DELIVERY_SLACK_MS = 10_000;

const RULES = `
governance:
  rules:
    hot-flood:
      type: threshold
      dimension: path
      match: { path: /hot }
      limit: ${LIMIT}
      windowMs: ${WINDOW_MS}
      blockMs: ${BLOCK_MS}
`;

interface CacheStats {
  readonly blocks: number;
  readonly lifts: number;
  readonly expired: number;
}

interface Sample {
  readonly sentAt: number;
  doneAt: number;
  status: number;
}

/** One gateway process (fixtures/burst-gateway.mjs). */
class GatewayProcess {
  port = 0;
  #seq = 0;
  constructor(readonly child: ChildProcess) {}

  static async start(spec: object): Promise<GatewayProcess> {
    const g = new GatewayProcess(
      fork(fileURLToPath(new URL('./fixtures/burst-gateway.mjs', import.meta.url)), [JSON.stringify(spec)], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      }),
    );
    g.port = await new Promise<number>((resolve, reject) => {
      g.child.once('exit', (code) => reject(new Error(`gateway process exited with ${code} before it was ready`)));
      g.child.on('message', (m: { type: string; port?: number }) => {
        if (m.type === 'ready') resolve(m.port!);
      });
    });
    return g;
  }

  stats(): Promise<{ blocked: boolean; cache: CacheStats; consumeErrors: number }> {
    const id = ++this.#seq;
    return new Promise((resolve, reject) => {
      const onMessage = (m: { type: string; id?: number; blocked: boolean; cache: CacheStats; consumeErrors: number }) => {
        if (m.type !== 'stats' || m.id !== id) return;
        this.child.off('message', onMessage);
        resolve(m);
      };
      this.child.on('message', onMessage);
      this.child.send({ type: 'stats', id }, (err) => err && reject(err));
    });
  }

  async close(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = once(this.child, 'exit');
    this.child.send({ type: 'close' }, () => undefined);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

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

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what} after ${timeoutMs} ms`);
    await sleep(50);
  }
}

/** Runs the load generator (fixtures/burst-load.mjs) to its end; its samples per gateway. */
async function load(
  ports: number[],
  phases: { rate: number; ms: number }[],
): Promise<{ phases: { startedAt: number; endedAt: number }[]; samples: Sample[][] }> {
  const child = fork(fileURLToPath(new URL('./fixtures/burst-load.mjs', import.meta.url)), [
    JSON.stringify({ ports, path: '/hot', phases }),
  ]);
  const done = new Promise<{ phases: { startedAt: number; endedAt: number }[]; samples: [number, number, number][][] }>(
    (resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`the load generator exited with ${code} before it reported`)));
      child.on('message', (m: { type: string; phases: []; samples: [] }) => {
        if (m.type === 'done') resolve(m);
      });
    },
  );
  try {
    const r = await done;
    return {
      phases: r.phases,
      samples: r.samples.map((list) => list.map(([sentAt, doneAt, status]) => ({ sentAt, doneAt, status }))),
    };
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = once(child, 'exit');
      child.kill();
      await exited;
    }
  }
}

describe.skipIf(process.env.SLUICE_FLEET_SCENARIOS !== '1')(
  'a sustained burst over RocketMQ LiteTopic, three gateway processes',
  () => {
    const endpoints = rocketMqEndpoints();
    const prefix = randomPrefix().replace('-', '_');
    let aggregatorTransport: RocketMqTransport;
    let aggregator: Aggregator;
    let consumeErrors = 0;
    const gateways: GatewayProcess[] = [];

    beforeAll(async () => {
      aggregatorTransport = new RocketMqTransport({
        partitions: PARTITIONS,
        endpoints,
        prefix,
        onConsumeError: (err) => {
          if (consumeErrors++ < 5) console.error(`[aggregator] receive failed: ${(err as Error)?.message ?? String(err)}`);
        },
      });
      aggregator = new Aggregator({
        transport: aggregatorTransport,
        rules: compileRules(RULES, { file: 'rules.yaml' }).governance,
        ownership: new MemoryOwnershipStore(),
        tickMs: TICK_MS,
        snapshotMs: 0,
      });
      await aggregator.start();
      for (let i = 0; i < 3; i++) {
        gateways.push(
          await GatewayProcess.start({
            partitions: PARTITIONS,
            endpoints,
            prefix,
            subscriberId: `${prefix}_g${i}`,
            path: '/hot',
          }),
        );
      }
      // The aggregator reads /hot before the measured part starts.
      let turn = 0;
      await until(
        'the aggregator to read events',
        async () => {
          await get(gateways[turn++ % gateways.length]!.port, '/hot');
          await sleep(200);
          return aggregator.stats().events > 0 ? true : undefined;
        },
        45_000,
      );
    }, 90_000);

    afterAll(async () => {
      for (const g of gateways) await g.close();
      await aggregator?.close();
      await aggregatorTransport?.close();
    });

    it('keeps /hot blocked on every gateway from its first 429 until the burst ends, then lifts it', async () => {
      const ports = gateways.map((g) => g.port);
      const timeline: { lagMs: number[]; [k: string]: unknown }[] = [];
      let watching = true;
      const watch = (async () => {
        while (watching) {
          const s = aggregator.stats();
          timeline.push({
            t: Date.now(),
            lagMs: s.partitions.map((p) => p.lagMs),
            events: s.events,
            rejected: s.rejected,
            late: s.lateEvents,
            blocks: s.blocksSent,
            lifts: s.liftsSent,
            active: s.activeBlocks,
          });
          await sleep(250);
        }
      })();
      const run = await load(ports, [
        { rate: WARM_RATE, ms: WARM_MS },
        { rate: BURST_RATE, ms: BURST_MS },
      ]);
      const start = run.phases[1]!.startedAt;
      const burstEnd = run.phases[1]!.endedAt;
      // Lifted where the gateway holds the block no more: by the lift, or by its TTL if the lift was lost.
      const liftedAt = await until(
        'every gateway to lift the block',
        async () => {
          const stats = await Promise.all(gateways.map((g) => g.stats()));
          return stats.every((x) => !x.blocked) ? Date.now() : undefined;
        },
        WINDOW_MS + TICK_MS + DELIVERY_SLACK_MS + 5_000,
      ).catch(() => NaN);
      watching = false;
      await watch;
      const caches = await Promise.all(gateways.map((g) => g.stats()));

      const report = run.samples.map((all, i) => {
        const list = all.filter((x) => x.sentAt >= start);
        const firstBlock = list.filter((x) => x.status === 429).reduce((m, x) => Math.min(m, x.doneAt), Infinity);
        return {
          sent: list.length,
          passed: list.filter((x) => x.status === 200).length,
          rejected: list.filter((x) => x.status === 429).length,
          passedAfterBlock: list.filter((x) => x.sentAt > firstBlock && x.status === 200).length,
          blockedAfterMs: firstBlock - start,
          lifts: caches[i]!.cache.lifts,
          expired: caches[i]!.cache.expired,
        };
      });
      const a = aggregator.stats();
      const figures = {
        report,
        liftAfterEndMs: liftedAt - burstEnd,
        maxLagMs: Math.max(...timeline.map((x) => Math.max(...x.lagMs))),
        aggregator: {
          tallyBatches: a.tallyBatches,
          rejected: a.rejected,
          late: a.lateEvents,
          blocks: a.blocksSent,
          lifts: a.liftsSent,
        },
        consumeErrors,
      };
      console.log(`sustained burst over RocketMQ lite: ${JSON.stringify(figures)}`);
      const detail = JSON.stringify({ ...figures, timeline });
      console.log(
        `aggregator every 250 ms (t from the burst's start): ${JSON.stringify(timeline.map((x) => ({ ...x, t: (x.t as number) - start })))}`,
      );
      for (const r of report) {
        // The block reached every gateway during the burst...
        expect(r.blockedAfterMs, detail).toBeLessThan(BURST_MS);
        // ...and from then on nothing passed there.
        expect(r.passedAfterBlock, detail).toBe(0);
        expect(r.sent, detail).toBe(r.passed + r.rejected);
      }
      expect(aggregator.stats().rejected, detail).toBeGreaterThan(0);
      expect(aggregator.stats().malformedBatches, detail).toBe(0);
      // The lift reached every gateway within the bound after the burst's end.
      expect(liftedAt - burstEnd, detail).toBeLessThanOrEqual(WINDOW_MS + TICK_MS + DELIVERY_SLACK_MS);
      expect(await Promise.all(ports.map((p) => get(p, '/hot'))), detail).toEqual([200, 200, 200]);
    }, 60_000);
  },
);
