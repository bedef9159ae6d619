import { randomUUID } from 'node:crypto';
import { mkdir, open, readFile, readdir, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '@sluice/core';
import { z } from 'zod';
import { RulesError, RulesErrorCodes, storeUnavailable } from '../errors.js';
import {
  DEFAULT_MAX_VERSIONS,
  VersionCache,
  checkLimit,
  checkVersion,
  closed,
  compileOptions,
  conflict,
  corrupt,
  diffVersions,
  metaOf,
  notFound,
  prepareChange,
  storedMetaSchema,
  toRuleVersion,
  type Change,
} from './common.js';
import type {
  ApplyOptions,
  HistoryOptions,
  RollbackOptions,
  RuleDiff,
  RuleListener,
  RuleStore,
  RuleVersion,
  RuleVersionMeta,
} from './types.js';
import { FileRolloutStore } from '../rollout/file.js';
import type { RolloutStore } from '../rollout/store.js';
import { RuleStoreHealth } from './health.js';
import { VersionWatch } from './watch.js';

/** Options of {@link FileRuleStore}. */
export interface FileRuleStoreOptions {
  /** The directory holding the versions; created on the first change. */
  dir: string;
  /**
   * Versions kept; older ones are deleted.
   * @default 1000
   */
  maxVersions?: number;
  /**
   * How often watchers check the current version, in ms.
   * @default 250
   */
  pollIntervalMs?: number;
  /**
   * How long a change waits for another writer's lock before failing with
   * `SLUICE_ERR_RULE_STORE_UNAVAILABLE`, in ms.
   * @default 5000
   */
  lockTimeoutMs?: number;
  /**
   * A lock older than this is taken to be left by a crashed writer and is broken, in ms.
   * @default 30000
   */
  staleLockMs?: number;
  /** Wall clock for `createdAt`, in ms since the epoch. @default Date.now */
  now?: () => number;
  /** Where watch problems are reported. */
  logger?: Logger;
}

const optionsSchema = z.strictObject({
  dir: z.string().min(1, 'must not be empty'),
  maxVersions: z.number().int('must be an integer').min(1).max(100_000).default(DEFAULT_MAX_VERSIONS),
  pollIntervalMs: z.number().int('must be an integer').min(10).max(60_000).default(250),
  lockTimeoutMs: z.number().int('must be an integer').min(0).max(600_000).default(5000),
  staleLockMs: z.number().int('must be an integer').min(1000).max(3_600_000).default(30_000),
  now: z.custom<() => number>((f) => typeof f === 'function', 'must be a function').default(() => Date.now),
  logger: z.custom<Logger>((l) => typeof l === 'object' && l !== null, 'must be a logger').optional(),
});

const versionFileSchema = storedMetaSchema.extend({ format: z.literal(1), source: z.string() });
const pointerSchema = z.strictObject({ version: z.number().int().min(1) });

const VERSION_FILE = /^(\d{10})\.json$/;
const fileName = (v: number) => `${String(v).padStart(10, '0')}.json`;

function errno(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException | undefined)?.code;
}

/** Writes a file whole or not at all: a synced temporary file renamed over the target. */
async function writeAtomic(path: string, data: string): Promise<void> {
  const tmp = `${path}.${randomUUID()}.tmp`;
  try {
    const fh = await open(tmp, 'w');
    try {
      await fh.writeFile(data, 'utf8');
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (e) {
    await unlink(tmp).catch(() => undefined);
    throw e;
  }
}

/** Makes renames in `dir` durable; not every platform can sync a directory, which is fine. */
async function syncDir(dir: string): Promise<void> {
  try {
    const fh = await open(dir, 'r');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  } catch {
    // Best effort.
  }
}

/**
 * A rule store in a directory: `versions/<n>.json` (one JSON file per version: its record and
 * text) and `current` (a pointer to the current version), each written atomically (temporary
 * file, fsync, rename). Writers in several processes are serialized by a lock file. It
 * survives restarts: a new instance on the same directory sees everything. Watchers poll the
 * pointer every `pollIntervalMs`.
 *
 * @example
 * const store = new FileRuleStore({ dir: '/var/lib/sluice/rules' });
 * const v = await store.apply(text, { author: 'ana', reason: 'raise payments to 1200/min' });
 */
export class FileRuleStore implements RuleStore {
  readonly #dir: string;
  readonly #versions: string;
  readonly #pointer: string;
  readonly #lock: string;
  readonly #options: z.output<typeof optionsSchema>;
  readonly #cache = new VersionCache();
  readonly #watch: VersionWatch;
  readonly #health: RuleStoreHealth;
  /** Changes from this instance, one at a time (other processes wait on the lock file). */
  #queue: Promise<unknown> = Promise.resolve();
  #rollouts: FileRolloutStore | undefined;
  #closed = false;

  constructor(options: FileRuleStoreOptions) {
    this.#options = compileOptions(optionsSchema, options, 'options');
    this.#dir = this.#options.dir;
    this.#versions = join(this.#dir, 'versions');
    this.#pointer = join(this.#dir, 'current');
    this.#lock = join(this.#dir, 'lock');
    this.#health = new RuleStoreHealth(this.#options.logger, `rule store ${this.#dir}`);
    this.#watch = new VersionWatch(
      { readCurrent: () => this.#readPointer(), load: (v) => this.get(v) },
      this.#options.pollIntervalMs,
      this.#health,
      this.#options.logger,
    );
  }

  async current(): Promise<RuleVersion | undefined> {
    this.#open();
    const v = await this.#readPointer();
    return v === 0 ? undefined : this.get(v);
  }

  async apply(text: string, options: ApplyOptions): Promise<RuleVersion> {
    this.#open();
    return this.#serial(prepareChange(text, options));
  }

  async rollback(version: number, options: RollbackOptions): Promise<RuleVersion> {
    this.#open();
    const old = await this.get(checkVersion(version));
    return this.#serial(prepareChange(old.source, { ...options, file: old.file }, old.version));
  }

  async get(version: number): Promise<RuleVersion> {
    this.#open();
    checkVersion(version);
    const cached = this.#cache.get(version);
    if (cached) return cached;
    const current = await this.#readPointer();
    // A version file past the pointer was written by a change that never completed.
    if (version > current) throw notFound(version);
    const doc = await this.#readVersionFile(version);
    const v = await toRuleVersion(metaOf(doc), doc.source);
    this.#cache.set(v);
    return v;
  }

  async history(options: HistoryOptions = {}): Promise<RuleVersionMeta[]> {
    this.#open();
    const limit = checkLimit(options.limit, this.#options.maxVersions);
    const current = await this.#readPointer();
    const versions = (await this.#listVersions())
      .filter((v) => v <= current)
      .slice(-limit)
      .reverse();
    const out: RuleVersionMeta[] = [];
    for (const v of versions) {
      const cached = this.#cache.get(v);
      if (cached) {
        const { source: _s, ruleSet: _r, ...meta } = cached;
        out.push(Object.freeze(meta));
        continue;
      }
      try {
        out.push(metaOf(await this.#readVersionFile(v)));
      } catch (e) {
        // Pruned by another process since the listing.
        if (e instanceof RulesError && e.code === RulesErrorCodes.RULE_VERSION_NOT_FOUND) continue;
        throw e;
      }
    }
    return out;
  }

  async diff(from: number, to: number): Promise<RuleDiff> {
    this.#open();
    return diffVersions(await this.get(checkVersion(from, 'from')), await this.get(checkVersion(to, 'to')));
  }

  watch(listener: RuleListener): () => void {
    this.#open();
    return this.#watch.add(listener);
  }

  /** The rollout kept in this store's directory (`rollout.json`). */
  rolloutStore(): RolloutStore {
    this.#open();
    this.#rollouts ??= new FileRolloutStore(this.#dir, this.#options.now, this.#health);
    return this.#rollouts;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#watch.close();
    await this.#queue.catch(() => undefined);
    this.#health.close();
  }

  #open(): void {
    if (this.#closed) throw closed();
  }

  /** Commits in call order; texts are compiled meanwhile, in parallel. */
  #serial(change: Promise<Change>): Promise<RuleVersion> {
    // An invalid text rejects `run` (the caller's), never the queue.
    change.catch(() => undefined);
    const run = this.#queue.then(async () => this.#commit(await change));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #commit(change: Change): Promise<RuleVersion> {
    try {
      await mkdir(this.#versions, { recursive: true });
    } catch (e) {
      // A read-only root file system (a container's) is the usual cause: say where to write.
      throw storeUnavailable(`create ${this.#versions} (the rule versions need a writable directory: --rules-dir)`, e);
    }
    await this.#acquireLock();
    let made: RuleVersion;
    try {
      const current = await this.#readPointer();
      if (change.expectedVersion !== undefined && change.expectedVersion !== current) {
        throw conflict(change.expectedVersion, current);
      }
      const version = current + 1;
      const meta = metaOf({
        version,
        author: change.author,
        reason: change.reason,
        createdAt: new Date(this.#options.now()).toISOString(),
        hash: change.ruleSet.hash,
        file: change.file,
        rolledBackFrom: change.rolledBackFrom,
      });
      try {
        await writeAtomic(
          join(this.#versions, fileName(version)),
          `${JSON.stringify({ format: 1, ...meta, source: change.source })}\n`,
        );
        await syncDir(this.#versions);
        // The version exists once the pointer names it; a crash before this leaves an orphan
        // file that the next change overwrites.
        await writeAtomic(this.#pointer, `${JSON.stringify({ version })}\n`);
        await syncDir(this.#dir);
      } catch (e) {
        throw storeUnavailable(`record version ${version}`, e);
      }
      made = Object.freeze({ ...meta, source: change.source, ruleSet: change.ruleSet });
      this.#cache.set(made);
      await this.#prune(version);
    } finally {
      await unlink(this.#lock).catch(() => undefined);
    }
    this.#watch.kick();
    return made;
  }

  async #prune(current: number): Promise<void> {
    const keepFrom = current - this.#options.maxVersions + 1;
    if (keepFrom <= 1) return;
    for (const v of await this.#listVersions()) {
      if (v >= keepFrom) break;
      await unlink(join(this.#versions, fileName(v))).catch(() => undefined);
    }
    this.#cache.dropBelow(keepFrom);
  }

  async #acquireLock(): Promise<void> {
    const deadline = Date.now() + this.#options.lockTimeoutMs;
    for (;;) {
      try {
        const fh = await open(this.#lock, 'wx');
        await fh.writeFile(`${process.pid}\n`);
        await fh.close();
        return;
      } catch (e) {
        if (errno(e) !== 'EEXIST') throw storeUnavailable(`lock ${this.#lock}`, e);
      }
      try {
        const { mtimeMs } = await stat(this.#lock);
        if (Date.now() - mtimeMs > this.#options.staleLockMs) {
          await unlink(this.#lock).catch(() => undefined);
          continue;
        }
      } catch (e) {
        if (errno(e) === 'ENOENT') continue;
        throw storeUnavailable(`lock ${this.#lock}`, e);
      }
      if (Date.now() >= deadline) {
        throw storeUnavailable(`lock ${this.#lock}`, new Error(`another writer held it for ${this.#options.lockTimeoutMs} ms`));
      }
      await sleep(10 + Math.floor(Math.random() * 20));
    }
  }

  async #readPointer(): Promise<number> {
    let text: string;
    try {
      text = await readFile(this.#pointer, 'utf8');
    } catch (e) {
      if (errno(e) === 'ENOENT') return 0;
      throw storeUnavailable(`read ${this.#pointer}`, e);
    }
    try {
      return pointerSchema.parse(JSON.parse(text)).version;
    } catch (e) {
      throw corrupt(`${this.#pointer} is not a version pointer`, e);
    }
  }

  async #readVersionFile(version: number): Promise<z.output<typeof versionFileSchema>> {
    const path = join(this.#versions, fileName(version));
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (e) {
      if (errno(e) === 'ENOENT') throw notFound(version);
      throw storeUnavailable(`read ${path}`, e);
    }
    try {
      const doc = versionFileSchema.parse(JSON.parse(text));
      if (doc.version !== version) throw new Error(`it records version ${doc.version}`);
      return doc;
    } catch (e) {
      throw corrupt(`${path} is not a rule version`, e);
    }
  }

  async #listVersions(): Promise<number[]> {
    let names: string[];
    try {
      names = await readdir(this.#versions);
    } catch (e) {
      if (errno(e) === 'ENOENT') return [];
      throw storeUnavailable(`list ${this.#versions}`, e);
    }
    return names
      .map((n) => VERSION_FILE.exec(n)?.[1])
      .filter((n): n is string => n !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
  }
}
