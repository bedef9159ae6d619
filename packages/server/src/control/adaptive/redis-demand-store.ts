import { readFileSync } from 'node:fs';
import { evalScript, plainScript, resignLeadership, takeLeadership, type PlainScript } from '@sluice/redis/kit';
import type { Cluster, Redis } from 'ioredis';
import type { DemandCounts, DemandStore } from './demand-store.js';
import type { IntervalDemand } from './policy.js';

let adaptiveScript: PlainScript | undefined;

function script(): PlainScript {
  // lua/ is a sibling of both src/ and dist/ (three levels up from src/control/adaptive/).
  adaptiveScript ??= plainScript(readFileSync(new URL('../../../lua/adaptive.lua', import.meta.url), 'utf8'));
  return adaptiveScript;
}

/** Adds counts by the script; it answers -1 only to arguments it refuses. */
async function add(client: Redis | Cluster, key: string, args: (string | number)[]): Promise<void> {
  const reply = await evalScript(client, script(), [key], ['2', ...args]);
  if (reply !== 1) throw new Error(`the adaptive script refused its arguments (reply ${String(reply)})`);
}

/** Most intervals one read asks for (a week of minutes is 10,080). */
const MAX_READ = 20_000;

/** Hash fields of an interval (see lua/adaptive.lua). */
const FIELDS = ['d', 'r', 'p', 'w', 'wm'] as const;

/**
 * Demand counts in Redis, summed by every server of the fleet, and the decider of each adaptive
 * resource. A resource's keys share one hash tag, so they live on one Redis Cluster slot.
 *
 * | key                                           | type   | content                             |
 * | --------------------------------------------- | ------ | ----------------------------------- |
 * | `<prefix>{adapt:<resource>}:d:<interval>:<start>` | HASH | one interval's counts, with a TTL |
 * | `<prefix>{adapt:<resource>}:move`            | STRING | when the limit last moved (ms)      |
 * | `<prefix>{adapt:<resource>}:lead`            | STRING | the decider's leadership (`takeLeadership`) |
 */
export class RedisDemandStore implements DemandStore {
  readonly #client: Redis | Cluster;
  readonly #prefix: string;

  /** @param client a connected client the store uses and does not close */
  constructor(client: Redis | Cluster, prefix = 'sluice:') {
    this.#client = client;
    this.#prefix = prefix;
  }

  #key(resource: string, suffix: string): string {
    return `${this.#prefix}{adapt:${resource}}:${suffix}`;
  }

  async add(resource: string, intervalMs: number, start: number, c: DemandCounts, retainMs: number): Promise<void> {
    const key = this.#key(resource, `d:${intervalMs}:${start}`);
    await add(this.#client, key, [c.decided, c.rejected, c.waits, c.waitedMs, c.peakShare, Math.ceil(retainMs)]);
  }

  async read(resource: string, intervalMs: number, from: number, to: number): Promise<IntervalDemand[]> {
    const starts: number[] = [];
    for (let s = Math.ceil(from / intervalMs) * intervalMs; s <= to && starts.length < MAX_READ; s += intervalMs) starts.push(s);
    if (starts.length === 0) return [];
    const pipeline = this.#client.pipeline();
    for (const s of starts) pipeline.hmget(this.#key(resource, `d:${intervalMs}:${s}`), ...FIELDS);
    const replies = (await pipeline.exec()) ?? [];
    const out: IntervalDemand[] = [];
    replies.forEach(([err, value], i) => {
      if (err) throw err;
      const v = value as (string | null)[];
      if (v[0] === null) return;
      const n = (k: number): number => Number(v[k] ?? 0);
      out.push({ start: starts[i]!, decided: n(0), rejected: n(1), peakShare: n(2), waits: n(3), waitedMs: n(4) });
    });
    return out;
  }

  async lastMove(resource: string): Promise<number | undefined> {
    const v = await this.#client.get(this.#key(resource, 'move'));
    return v === null ? undefined : Number(v);
  }

  async recordMove(resource: string, at: number, retainMs: number): Promise<void> {
    await this.#client.set(this.#key(resource, 'move'), String(at), 'PX', Math.ceil(retainMs));
  }

  async lead(resource: string, owner: string, ttlMs: number): Promise<boolean> {
    return takeLeadership(this.#client, this.#key(resource, 'lead'), owner, ttlMs);
  }

  async resign(resource: string, owner: string): Promise<void> {
    await resignLeadership(this.#client, this.#key(resource, 'lead'), owner);
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
