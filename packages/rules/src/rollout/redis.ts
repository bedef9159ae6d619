import { readFileSync } from 'node:fs';
import { evalScript, plainScript, resignLeadership, takeLeadership, type PlainScript } from '@sluice/redis/kit';
import type { Cluster, Redis } from 'ioredis';
import { storeUnavailable, type RulesError } from '../errors.js';
import type { RuleStoreHealth } from '../store/health.js';
import type { RolloutState } from './plan.js';
import { parseRollout, rolloutConflict, type RolloutStore } from './store.js';

const scripts = new Map<string, PlainScript>();

function script(name: 'rollout-write'): PlainScript {
  let s = scripts.get(name);
  if (!s) {
    // lua/ is a sibling of both src/ and dist/.
    s = plainScript(readFileSync(new URL(`../../lua/${name}.lua`, import.meta.url), 'utf8'));
    scripts.set(name, s);
  }
  return s;
}

/** How long tallies of a phase are kept after their last write, in ms. */
const TALLY_TTL_MS = 86_400_000;

/**
 * The rollout of a {@link RedisRuleStore}, on its connection and under its hash tag: the state
 * is one hash written by compare-and-set (`lua/rollout-write.lua`), the decider's leadership one
 * key with a time-to-live (`takeLeadership` of `@sluice/redis/kit`; the key keeps its 0.1 name,
 * `rollout:lease`, so that servers of both versions share it), the tallies one hash per phase
 * that every server adds its counts to.
 */
export class RedisRolloutStore implements RolloutStore {
  readonly #client: Redis | Cluster;
  readonly #keys: { state: string; leadership: string; tally: string };
  readonly #health: RuleStoreHealth | undefined;

  /**
   * `base` is the rule store's key base (its prefix and hash tag); `health` the rule store's, told
   * of failures and answers so that an outage is one spell in the log.
   */
  constructor(client: Redis | Cluster, base: string, health?: RuleStoreHealth) {
    this.#client = client;
    this.#health = health;
    this.#keys = { state: `${base}rollout`, leadership: `${base}rollout:lease`, tally: `${base}rollout:tally:` };
  }

  async read(): Promise<RolloutState | undefined> {
    let raw: string | null;
    try {
      raw = await this.#client.hget(this.#keys.state, 'state');
    } catch (e) {
      throw this.#failed('read the rollout', e);
    }
    this.#health?.answered();
    return raw === null ? undefined : parseRollout(raw, this.#keys.state);
  }

  async write(next: RolloutState, expectedRevision: number): Promise<RolloutState> {
    const state = Object.freeze({ ...next, revision: expectedRevision + 1 });
    let reply: unknown;
    try {
      reply = await evalScript(
        this.#client,
        script('rollout-write'),
        [this.#keys.state],
        ['1', String(expectedRevision), JSON.stringify(state)],
      );
    } catch (e) {
      throw this.#failed('write the rollout', e);
    }
    const [code, stored] = reply as [number, number | undefined];
    if (code !== 0) throw rolloutConflict(expectedRevision, Number(stored));
    return state;
  }

  async lead(owner: string, ttlMs: number): Promise<boolean> {
    try {
      return await takeLeadership(this.#client, this.#keys.leadership, owner, ttlMs);
    } catch (e) {
      throw this.#failed('take the rollout leadership', e);
    }
  }

  async resign(owner: string): Promise<void> {
    try {
      await resignLeadership(this.#client, this.#keys.leadership, owner);
    } catch (e) {
      throw this.#failed('resign the rollout leadership', e);
    }
  }

  async addTallies(id: string, phase: number, counts: ReadonlyMap<string, number>): Promise<void> {
    if (counts.size === 0) return;
    const key = `${this.#keys.tally}${id}:${phase}`;
    const multi = this.#client.multi();
    for (const [field, n] of counts) multi.hincrby(key, field, n);
    multi.pexpire(key, TALLY_TTL_MS);
    try {
      await multi.exec();
    } catch (e) {
      throw this.#failed('count rollout decisions', e);
    }
  }

  async tallies(id: string, phase: number): Promise<Map<string, number>> {
    let raw: Record<string, string>;
    try {
      raw = await this.#client.hgetall(`${this.#keys.tally}${id}:${phase}`);
    } catch (e) {
      throw this.#failed('read rollout decision counts', e);
    }
    return new Map(Object.entries(raw).map(([k, v]) => [k, Number(v)]));
  }

  async close(): Promise<void> {
    // The connection is the rule store's.
  }

  /** The error for a call that could not `what`, told to the rule store's health. */
  #failed(what: string, e: unknown): RulesError {
    const err = storeUnavailable(what, e);
    this.#health?.failed(err);
    return err;
  }
}
