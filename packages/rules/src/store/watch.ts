import type { Logger } from '@sluice/core';
import type { RuleStoreHealth } from './health.js';
import type { RuleListener, RuleVersion } from './types.js';

/** How a store's watch reads the current version number (0: none) and loads a version. */
export interface WatchSource {
  readCurrent(): Promise<number>;
  load(version: number): Promise<RuleVersion>;
}

/**
 * Delivers current versions to listeners. Polls the store every `intervalMs` while anyone
 * listens, and at once when {@link kick}ed (after a local change, or a change notification).
 * One poll runs at a time; a kick during a poll runs another right after it. Each listener
 * gets each current version once, whatever it was when it subscribed.
 */
export class VersionWatch {
  readonly #source: WatchSource;
  readonly #intervalMs: number;
  readonly #logger: Logger | undefined;
  readonly #health: RuleStoreHealth;
  readonly #listeners = new Map<RuleListener, number>();
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #again = false;
  #closed = false;

  /** Failed polls go to `health` (one line a spell); a listener that throws to `logger`. */
  constructor(source: WatchSource, intervalMs: number, health: RuleStoreHealth, logger?: Logger) {
    this.#source = source;
    this.#intervalMs = intervalMs;
    this.#health = health;
    this.#logger = logger;
  }

  add(listener: RuleListener): () => void {
    if (this.#closed) return () => {};
    this.#listeners.set(listener, 0);
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.kick(), this.#intervalMs);
      // The owner's close() stops it; it alone must not keep a process alive.
      this.#timer.unref();
    }
    this.kick();
    return () => {
      this.#listeners.delete(listener);
      if (this.#listeners.size === 0) this.#stopTimer();
    };
  }

  /** Polls now (or right after the poll in progress). */
  kick(): void {
    if (this.#closed || this.#listeners.size === 0) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = this.#loop();
  }

  async #loop(): Promise<void> {
    try {
      do {
        this.#again = false;
        await this.#poll();
      } while (this.#again && !this.#closed);
    } finally {
      this.#running = undefined;
    }
  }

  async #poll(): Promise<void> {
    try {
      const current = await this.#source.readCurrent();
      const behind = () => [...this.#listeners].filter(([, seen]) => seen !== current).map(([l]) => l);
      if (current === 0 || behind().length === 0) {
        this.#health.answered();
        return;
      }
      const version = await this.#source.load(current);
      this.#health.answered();
      // Listeners added or removed while loading are honoured: only those still here and behind.
      for (const listener of behind()) {
        if (this.#closed) return;
        this.#listeners.set(listener, current);
        try {
          listener(version);
        } catch (err) {
          this.#logger?.warn({ err, version: current }, 'a rule listener threw');
        }
      }
    } catch (err) {
      // Polled again at the next interval; the health logs the spell once.
      this.#health.failed(err);
    }
  }

  #stopTimer(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Stops polling and forgets listeners; waits for a poll in progress. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#stopTimer();
    this.#listeners.clear();
    await this.#running;
  }
}
