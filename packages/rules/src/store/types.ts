import type { RuleSetDiff } from '../diff.js';
import type { RolloutStore } from '../rollout/store.js';
import type { RuleSet } from '../ruleset.js';

/** What is recorded about a rule version, without its text. */
export interface RuleVersionMeta {
  /** 1, 2, ...: every change gets the next number, rollbacks included. */
  readonly version: number;
  /** Who made the change. */
  readonly author: string;
  /** Why. */
  readonly reason: string;
  /** When the store recorded it (ISO 8601, UTC). */
  readonly createdAt: string;
  /** The rule set's content hash (`RuleSet.hash`) when it was recorded. */
  readonly hash: string;
  /** The file name the text was validated as (also what error messages name). */
  readonly file: string;
  /** For a rollback: the version whose content this one restores. */
  readonly rolledBackFrom?: number;
}

/** A rule version: its record, its text as applied, and the rule set compiled from it. */
export interface RuleVersion extends RuleVersionMeta {
  readonly source: string;
  readonly ruleSet: RuleSet;
}

/** Options of {@link RuleStore.apply}. */
export interface ApplyOptions {
  /** Who makes the change (1..256 characters). */
  author: string;
  /** Why (1..256 characters). */
  reason: string;
  /**
   * The name the text is validated as, shown in error messages; its extension picks the
   * format (`.json`, else YAML).
   * @default 'rules.yaml'
   */
  file?: string;
  /**
   * Apply only if this is still the current version (0: only if there is none yet); otherwise
   * fail with `SLUICE_ERR_RULE_CONFLICT`. Without it the change applies on top of whatever
   * is current.
   */
  expectedVersion?: number;
}

/** Options of {@link RuleStore.rollback}. */
export type RollbackOptions = Omit<ApplyOptions, 'file'>;

/** Options of {@link RuleStore.history}. */
export interface HistoryOptions {
  /**
   * Most versions returned, newest first.
   * @default 50
   */
  limit?: number;
}

/** The difference between two versions: structured, and as a unified diff of their text. */
export interface RuleDiff extends RuleSetDiff {
  readonly from: number;
  readonly to: number;
  /** `diff -u` of the two texts (empty when they are equal). */
  readonly text: string;
}

/** Called with the current version when it becomes known, and with each later current version. */
export type RuleListener = (version: RuleVersion) => void;

/**
 * A versioned store of rules. Every change is a new version with an author and a reason;
 * rollbacks are changes too. Invalid text never becomes a version.
 */
export interface RuleStore {
  /** The current version, or undefined before the first change. */
  current(): Promise<RuleVersion | undefined>;
  /**
   * Validates `text` and makes it the new current version. Throws `SLUICE_ERR_INVALID_RULES`
   * (nothing recorded) or `SLUICE_ERR_RULE_CONFLICT` (see `expectedVersion`).
   */
  apply(text: string, options: ApplyOptions): Promise<RuleVersion>;
  /** One version. Throws `SLUICE_ERR_RULE_VERSION_NOT_FOUND` if it was never made or was pruned. */
  get(version: number): Promise<RuleVersion>;
  /** The most recent versions, newest first. */
  history(options?: HistoryOptions): Promise<RuleVersionMeta[]>;
  /** What changed from version `from` to version `to`. */
  diff(from: number, to: number): Promise<RuleDiff>;
  /** Makes a new version with the content of `version`, recording `rolledBackFrom`. */
  rollback(version: number, options: RollbackOptions): Promise<RuleVersion>;
  /**
   * Calls `listener` with the current version (once known) and then with each new current
   * version, within a second of the change, from any process. Versions made in quick
   * succession may be coalesced: a listener always ends up with the latest. Returns a function
   * that stops the calls.
   */
  watch(listener: RuleListener): () => void;
  /** Stops watching and releases connections the store opened. */
  close(): Promise<void>;
  /**
   * Where this store keeps rollouts, next to its versions (on its connection, or in its
   * directory). Stores without one cannot roll versions out gradually.
   */
  rolloutStore?(): RolloutStore;
}
