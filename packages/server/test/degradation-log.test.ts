/**
 * What `sluice serve` logs when its Redis goes away for a few seconds under traffic: one line
 * per degradation when it starts (saying what failed and what the service does about it), one
 * when it ends, no stack traces, and decisions answered throughout. Needs `redis-server` on PATH
 * (a Redis of the test's own, killed and restarted) and the built CLI (`npm run build`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { TOKEN, call, eventually, serveOnOwnRedis } from './support.js';

// A paid API that must never be overrun (closed), and a database on the default policy (local).
const RULES = `
resources:
  api:payments:
    limits: { algorithm: token-bucket, limit: 1000000, windowMs: 1000 }
    onStoreFailure: closed
  db:orders: { limits: { algorithm: token-bucket, limit: 1000000, windowMs: 1000 } }
`;

interface LogLine {
  readonly level: string;
  readonly msg: string;
  readonly event?: string;
  readonly fallbackDecisions?: number;
  readonly [field: string]: unknown;
}

/** Calls in a loop (one in flight per worker) until stopped: every answer's HTTP status. */
function traffic(url: string, workers = 3) {
  const statuses: number[] = [];
  let running = true;
  const loops = Array.from({ length: workers }, async (_, w) => {
    for (let i = 0; running; i++) {
      const resource = w === 0 ? 'api:payments' : 'db:orders';
      const checked = await call(url, '/v1/check', { resource, key: `k${i % 50}` });
      statuses.push(checked.status);
      // Outcome reports too: the store tallies them, and they fail while it is away.
      const reported = await call(url, '/v1/outcomes', { items: [{ resource, ok: true, durationMs: 3 }] }, { token: TOKEN });
      statuses.push(reported.status);
      await sleep(5);
    }
  });
  return {
    statuses,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

describe('sluice serve while its Redis is away for a few seconds', () => {
  const own = serveOnOwnRedis(RULES);

  it('logs one line when each degradation starts and one when it ends, no stacks, and answers every call', async () => {
    const before = own.server.logs.length;
    const load = traffic(own.server.url);
    await eventually(async () => load.statuses.length > 50);
    await own.redis.kill();
    const downAt = load.statuses.length;
    // The outage: about three seconds of calls answered by the store-failure policies.
    await sleep(3000);
    await eventually(async () => load.statuses.length > downAt + 50);
    await own.redis.restart();
    await eventually(async () => own.server.logs.slice(before).some((l) => l.includes('"event":"store_unreachable_ended"')));
    // Calls after the return are decided on Redis again.
    const backAt = load.statuses.length;
    await eventually(async () => load.statuses.length > backAt + 50);
    await load.stop();

    // Every call was answered with a decision or a report's answer: allowed, denied, or taken.
    expect(load.statuses.filter((s) => s !== 200 && s !== 429)).toEqual([]);

    const raw = own.server.logs.slice(before);
    // No stack trace anywhere (pino would write it as "stack", each frame "\n    at ").
    expect(raw.filter((l) => l.includes('"stack"') || l.includes('\\n    at '))).toEqual([]);
    const lines = raw.map((l) => JSON.parse(l) as LogLine);
    const warned = lines.filter((l) => l.level === 'warn' || l.level === 'error');
    // Each degradation is logged once while it lasts (its repeats are counted, not logged).
    const events = warned.map((l) => l.event);
    expect(events.every((e) => e !== undefined)).toBe(true);
    expect(new Set(events).size).toBe(events.length);

    const down = warned.filter((l) => l.event === 'store_unreachable');
    expect(down).toHaveLength(1);
    // The reason is how the kill reached the server: the connection closed, reset, a broken pipe.
    expect(down[0]!.msg).toMatch(
      new RegExp(
        `^store redis at 127\\.0\\.0\\.1:${own.redis.port} unreachable \\(.+\\): ` +
          "deciding by the 'local' policy \\('closed' for api:payments\\) until it answers$",
      ),
    );
    const back = lines.filter((l) => l.event === 'store_unreachable_ended');
    expect(back).toHaveLength(1);
    expect(back[0]!.level).toBe('info');
    expect(back[0]!.fallbackDecisions).toBeGreaterThan(0);
    expect(back[0]!.msg).toMatch(
      new RegExp(
        `^store redis at 127\\.0\\.0\\.1:${own.redis.port} answers again after \\d+\\.\\d s: ` +
          `global decisions resumed \\(${back[0]!.fallbackDecisions} decisions made by the fallback meanwhile\\)$`,
      ),
    );
    // Every degradation that began has ended, each with one line.
    await eventually(async () => {
      const ended = new Set(own.server.logs.slice(before).map((l) => (JSON.parse(l) as LogLine).event));
      return events.every((e) => ended.has(`${e}_ended`));
    });
  });
});
