import { randomUUID } from 'node:crypto';
import { mkdir, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { storeUnavailable, type RulesError } from '../errors.js';
import type { RuleStoreHealth } from '../store/health.js';
import type { RolloutState } from './plan.js';
import { parseRollout, rolloutConflict, type RolloutStore } from './store.js';

const errno = (e: unknown) => (e as NodeJS.ErrnoException | undefined)?.code;

/** A lock older than this was left by a crashed writer, in ms. */
const STALE_LOCK_MS = 10_000;

/**
 * The rollout of a {@link FileRuleStore}, in its directory: `rollout.json` (the state) and
 * `rollout.lease` (the decider's leadership; the file keeps its 0.1 name), each replaced
 * atomically under `rollout.lock`. Tallies are
 * this process's own: servers sharing a rule directory share one machine, and the decider
 * judges by what it decided itself.
 */
export class FileRolloutStore implements RolloutStore {
  readonly #dir: string;
  readonly #now: () => number;
  readonly #tallies = new Map<string, Map<string, number>>();
  readonly #health: RuleStoreHealth | undefined;

  /** `health`: the rule store's, told of failures and answers so that an outage is one spell in the log. */
  constructor(dir: string, now: () => number = Date.now, health?: RuleStoreHealth) {
    this.#dir = dir;
    this.#now = now;
    this.#health = health;
  }

  async read(): Promise<RolloutState | undefined> {
    const path = join(this.#dir, 'rollout.json');
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (e) {
      if (errno(e) !== 'ENOENT') throw this.#failed(`read ${path}`, e);
      this.#health?.answered();
      return undefined;
    }
    this.#health?.answered();
    return parseRollout(text, path);
  }

  async write(next: RolloutState, expectedRevision: number): Promise<RolloutState> {
    return this.#locked(async () => {
      const stored = (await this.read())?.revision ?? 0;
      if (stored !== expectedRevision) throw rolloutConflict(expectedRevision, stored);
      const state = Object.freeze({ ...next, revision: expectedRevision + 1 });
      await this.#writeAtomic('rollout.json', JSON.stringify(state));
      return state;
    });
  }

  async lead(owner: string, ttlMs: number): Promise<boolean> {
    return this.#locked(async () => {
      const now = this.#now();
      const leadership = await this.#readLeadership();
      if (leadership !== undefined && leadership.owner !== owner && leadership.expiresAtMs > now) return false;
      await this.#writeAtomic('rollout.lease', JSON.stringify({ owner, expiresAtMs: now + ttlMs }));
      return true;
    });
  }

  async resign(owner: string): Promise<void> {
    await this.#locked(async () => {
      if ((await this.#readLeadership())?.owner === owner) await unlink(join(this.#dir, 'rollout.lease')).catch(() => undefined);
    });
  }

  async addTallies(id: string, phase: number, counts: ReadonlyMap<string, number>): Promise<void> {
    const key = `${id}:${phase}`;
    // Only the latest rollout's phases are kept.
    for (const k of this.#tallies.keys()) if (!k.startsWith(`${id}:`)) this.#tallies.delete(k);
    const t = this.#tallies.get(key) ?? new Map<string, number>();
    for (const [f, n] of counts) t.set(f, (t.get(f) ?? 0) + n);
    this.#tallies.set(key, t);
    return Promise.resolve();
  }

  async tallies(id: string, phase: number): Promise<Map<string, number>> {
    return Promise.resolve(new Map(this.#tallies.get(`${id}:${phase}`) ?? []));
  }

  async close(): Promise<void> {
    this.#tallies.clear();
    return Promise.resolve();
  }

  async #readLeadership(): Promise<{ owner: string; expiresAtMs: number } | undefined> {
    try {
      const v = JSON.parse(await readFile(join(this.#dir, 'rollout.lease'), 'utf8')) as {
        owner?: unknown;
        expiresAtMs?: unknown;
      };
      return typeof v.owner === 'string' && typeof v.expiresAtMs === 'number'
        ? { owner: v.owner, expiresAtMs: v.expiresAtMs }
        : undefined;
    } catch {
      // Missing or torn: free.
      return undefined;
    }
  }

  async #writeAtomic(name: string, data: string): Promise<void> {
    const path = join(this.#dir, name);
    const tmp = `${path}.${randomUUID()}.tmp`;
    try {
      const fh = await open(tmp, 'w');
      try {
        await fh.writeFile(`${data}\n`, 'utf8');
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, path);
    } catch (e) {
      await unlink(tmp).catch(() => undefined);
      throw this.#failed(`write ${path}`, e);
    }
  }

  async #locked<T>(fn: () => Promise<T>): Promise<T> {
    const lock = join(this.#dir, 'rollout.lock');
    try {
      await mkdir(this.#dir, { recursive: true });
    } catch (e) {
      throw this.#failed(`create ${this.#dir}`, e);
    }
    const deadline = Date.now() + 5000;
    for (;;) {
      try {
        await (await open(lock, 'wx')).close();
        break;
      } catch (e) {
        if (errno(e) !== 'EEXIST') throw this.#failed(`lock ${lock}`, e);
      }
      const age = await stat(lock).then(
        (s) => Date.now() - s.mtimeMs,
        () => 0,
      );
      if (age > STALE_LOCK_MS) await unlink(lock).catch(() => undefined);
      else if (Date.now() >= deadline) throw this.#failed(`lock ${lock}`, new Error('another writer held it for 5000 ms'));
      else await sleep(5 + Math.floor(Math.random() * 10));
    }
    try {
      return await fn();
    } finally {
      await unlink(lock).catch(() => undefined);
    }
  }

  /** The error for a call that could not `what`, told to the rule store's health. */
  #failed(what: string, e: unknown): RulesError {
    const err = storeUnavailable(what, e);
    this.#health?.failed(err);
    return err;
  }
}
