/**
 * Error codes of `@sluice/rules`. Faults about options and use after `close()` are core
 * `SluiceError`s (`SLUICE_ERR_INVALID_OPTIONS`, `SLUICE_ERR_CLOSED`); everything about rules
 * and their versions is a {@link RulesError} with one of these codes. The table is the single
 * place where they are defined; the package README documents each, checked by a test.
 */
export const RulesErrorCodes = {
  /** A rule file (or rule text given to a store) is malformed; `issues` says where and why. */
  INVALID_RULES: 'SLUICE_ERR_INVALID_RULES',
  /** A rule version was asked for that the store does not have (never made, or pruned). */
  RULE_VERSION_NOT_FOUND: 'SLUICE_ERR_RULE_VERSION_NOT_FOUND',
  /** A change expected another current version than the store has (optimistic concurrency). */
  RULE_CONFLICT: 'SLUICE_ERR_RULE_CONFLICT',
  /** The rule store's backing (its directory, or Redis) failed or did not answer. */
  RULE_STORE_UNAVAILABLE: 'SLUICE_ERR_RULE_STORE_UNAVAILABLE',
  /** The rule store holds data this package did not write or cannot read. */
  RULE_STORE_CORRUPT: 'SLUICE_ERR_RULE_STORE_CORRUPT',
  /** A rollout changed meanwhile, or an action does not fit where the rollout is (start while one runs, pause a finished one). */
  ROLLOUT_CONFLICT: 'SLUICE_ERR_ROLLOUT_CONFLICT',
  /** A rollout action found no rollout, or the rule store keeps none. */
  ROLLOUT_NOT_FOUND: 'SLUICE_ERR_ROLLOUT_NOT_FOUND',
} as const;

/** A stable rules error code, e.g. `SLUICE_ERR_INVALID_RULES`. */
export type RulesErrorCode = (typeof RulesErrorCodes)[keyof typeof RulesErrorCodes];

/** One problem found in a rule file. */
export interface RuleIssue {
  /** The file the problem is in, as named by the caller. */
  readonly file: string;
  /**
   * Where in the file, as a path (`resources."db:users".limits[0].burst`); empty for the file
   * as a whole (a syntax error, an empty file).
   */
  readonly path: string;
  /** What is wrong, without the file and path. */
  readonly message: string;
}

/** Options for {@link RulesError}. */
export interface RulesErrorOptions {
  /** The file the error is about. */
  file?: string;
  /** For `SLUICE_ERR_INVALID_RULES`: every problem found. */
  issues?: readonly RuleIssue[];
  /** For `SLUICE_ERR_RULE_VERSION_NOT_FOUND` and `SLUICE_ERR_RULE_CONFLICT`: the version concerned. */
  version?: number;
  /** The underlying error, if any. */
  cause?: unknown;
}

/** `file: path: message`, or `file: message` when the issue is about the whole file. */
export function formatIssue(issue: RuleIssue): string {
  return issue.path === '' ? `${issue.file}: ${issue.message}` : `${issue.file}: ${issue.path}: ${issue.message}`;
}

/**
 * The error `@sluice/rules` throws about rules and rule versions. Match on `code`, never on
 * `message`. For invalid rules the message lists every issue, one per line, each prefixed with
 * its file and path.
 *
 * @example
 * try { compileRules(text, { file: 'rules.yaml' }) } catch (e) {
 *   if (isRulesError(e, 'SLUICE_ERR_INVALID_RULES')) for (const i of e.issues) console.error(i.path, i.message);
 * }
 */
export class RulesError extends Error {
  /** Stable machine-readable code. */
  readonly code: RulesErrorCode;
  /** The file the error is about, when there is one. */
  readonly file: string | undefined;
  /** Every problem found (invalid rules only; empty otherwise). */
  readonly issues: readonly RuleIssue[];
  /** The version concerned (version not found, conflict). */
  readonly version: number | undefined;
  /** The first issue's path, like `SluiceError.field`. */
  readonly field: string | undefined;

  constructor(code: RulesErrorCode, message: string, options: RulesErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'RulesError';
    this.code = code;
    this.issues = Object.freeze([...(options.issues ?? [])]);
    this.file = options.file ?? this.issues[0]?.file;
    this.version = options.version;
    this.field = this.issues[0]?.path;
  }
}

/** True when `err` is a {@link RulesError}, optionally with the given code. */
export function isRulesError(err: unknown, code?: RulesErrorCode): err is RulesError {
  return err instanceof RulesError && (code === undefined || err.code === code);
}

/** The `SLUICE_ERR_INVALID_RULES` error for these issues (at least one). */
export function invalidRules(issues: readonly RuleIssue[]): RulesError {
  return new RulesError(RulesErrorCodes.INVALID_RULES, issues.map(formatIssue).join('\n'), { issues });
}

/**
 * `SLUICE_ERR_RULE_STORE_UNAVAILABLE`: the store could not `what` (e.g. "read rollout.json")
 * because of `cause`; a RulesError is passed on as it is.
 */
export function storeUnavailable(what: string, cause: unknown): RulesError {
  if (cause instanceof RulesError) return cause;
  return new RulesError(
    RulesErrorCodes.RULE_STORE_UNAVAILABLE,
    `the rule store cannot ${what}: ${cause instanceof Error ? cause.message : String(cause)}`,
    { cause },
  );
}
