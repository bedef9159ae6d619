import type { RolloutState } from './plan.js';
import { rolloutConflict, type RolloutStore } from './store.js';

/**
 * A rollout store in memory, for one process and for tests: the same compare-and-set,
 * leadership and tallies as the Redis and file stores, on an injected clock.
 */
export class MemoryRolloutStore implements RolloutStore {
  readonly #now: () => number;
  #state: RolloutState | undefined;
  #leadership: { owner: string; expiresAtMs: number } | undefined;
  readonly #tallies = new Map<string, Map<string, number>>();

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  read(): Promise<RolloutState | undefined> {
    return Promise.resolve(this.#state);
  }

  write(next: RolloutState, expectedRevision: number): Promise<RolloutState> {
    const stored = this.#state?.revision ?? 0;
    if (stored !== expectedRevision) return Promise.reject(rolloutConflict(expectedRevision, stored));
    this.#state = Object.freeze({ ...next, revision: expectedRevision + 1 });
    return Promise.resolve(this.#state);
  }

  lead(owner: string, ttlMs: number): Promise<boolean> {
    const now = this.#now();
    if (this.#leadership !== undefined && this.#leadership.owner !== owner && this.#leadership.expiresAtMs > now)
      return Promise.resolve(false);
    this.#leadership = { owner, expiresAtMs: now + ttlMs };
    return Promise.resolve(true);
  }

  resign(owner: string): Promise<void> {
    if (this.#leadership?.owner === owner) this.#leadership = undefined;
    return Promise.resolve();
  }

  addTallies(id: string, phase: number, counts: ReadonlyMap<string, number>): Promise<void> {
    const key = `${id}:${phase}`;
    const t = this.#tallies.get(key) ?? new Map<string, number>();
    for (const [f, n] of counts) t.set(f, (t.get(f) ?? 0) + n);
    this.#tallies.set(key, t);
    return Promise.resolve();
  }

  tallies(id: string, phase: number): Promise<Map<string, number>> {
    return Promise.resolve(new Map(this.#tallies.get(`${id}:${phase}`) ?? []));
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
