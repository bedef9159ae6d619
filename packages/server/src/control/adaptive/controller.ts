import {
  Degradation,
  OUTCOME_BUCKETS,
  OUTCOME_BUCKET_MS,
  isSluiceError,
  secondsText,
  type Logger,
  type OutcomeSource,
  type OutcomeTotals,
} from '@sluice/core';
import {
  adaptiveLimitIndex,
  isRulesError,
  setLimitInText,
  type AdaptiveRule,
  type RuleStore,
  type RuleVersion,
} from '@sluice/rules';
import type { DemandStore } from './demand-store.js';
import { judgeAdaptive, type AdaptiveMove } from './policy.js';

/** The author of every version an adaptive limit's move makes. */
export const ADAPTIVE_AUTHOR = 'adaptive';

/** Options of {@link AdaptiveController}. */
export interface AdaptiveControllerOptions {
  /** Where moves are applied as versions (and the current version is read). */
  readonly ruleStore: RuleStore;
  /** The fleet's demand counts and deciders. */
  readonly demand: DemandStore;
  /** Reported downstream outcomes, for the `aimd` policy (without it, `aimd` limits stay put). */
  readonly outcomes?: OutcomeSource;
  /** This server's id among the deciders (1..128 characters). */
  readonly owner: string;
  /** Milliseconds (epoch), the recorder's clock. @default Date.now */
  readonly now?: () => number;
  /** How often the rules are judged, in ms. @default 1000 */
  readonly tickMs?: number;
  readonly logger?: Logger;
  /** Called after each move is applied. */
  readonly onMove?: (resource: string, move: AdaptiveMove, version: number) => void;
  /**
   * While it returns true, no limit moves: a rollout is under way, and a version applied in the
   * middle of one would end it (and the rollout's judge compares cohorts under fixed limits).
   */
  readonly hold?: () => boolean;
}

/** A resource's adaptive limit as the dashboard and `sluice status` show it. */
export interface AdaptiveStatus {
  readonly resource: string;
  readonly policy: AdaptiveRule['policy'];
  readonly min: number;
  readonly max: number;
  /** The moved limit's value in the active version. */
  readonly limit: number;
  /** The window the limit (and `min`, `max`) counts calls over, in ms. */
  readonly windowMs: number;
  /** When it last moved (ISO 8601), if the store remembers. */
  readonly lastMoveAt?: string;
  /** Set when the store did not answer when asked for the last move (it is away): not known, not "never". */
  readonly lastMoveUnknown?: true;
  /** True while this server is the resource's decider. */
  readonly deciding: boolean;
}

/**
 * The starts (`[from, to]`, ms) of the demand intervals a round reads: for `aimd`, only the last
 * complete interval (the one it judges); for `demand`, every interval of its longest streak.
 */
export function judgedIntervals(rule: AdaptiveRule, now: number): [number, number] {
  const last = Math.floor(now / rule.intervalMs) * rule.intervalMs - rule.intervalMs;
  if (rule.policy === 'aimd') return [last, last];
  const streak = Math.max(rule.demand.rejectForMs, rule.demand.idleForMs);
  return [last - Math.ceil(streak / rule.intervalMs) * rule.intervalMs, last];
}

/**
 * The outcome tallies an `aimd` round judges at `now`: `ms`, read as whole buckets that have
 * ended (`ceil(ms / 1 s)` of them, at least one, capped at the tallies' retention), which began at
 * `from` by this clock.
 */
export function outcomeWindow(rule: AdaptiveRule, now: number): { ms: number; from: number } {
  const ms = Math.min(rule.intervalMs, OUTCOME_BUCKETS * OUTCOME_BUCKET_MS);
  const buckets = Math.max(1, Math.ceil(ms / OUTCOME_BUCKET_MS));
  return { ms, from: (Math.floor(now / OUTCOME_BUCKET_MS) - buckets) * OUTCOME_BUCKET_MS };
}

/** What one round of {@link AdaptiveController.tick} shares between resources. */
interface Round {
  current?: Promise<RuleVersion | undefined>;
}

/**
 * Moves adaptive limits. Every server runs one; for each adaptive resource, the one holding
 * the resource's decider leadership judges the fleet's demand (and downstream outcomes) by the rule's
 * policy and applies each move as a rule version (author {@link ADAPTIVE_AUTHOR}, the measured
 * reason), so history, diff and rollback apply to moves as to any change. A move is applied
 * only on top of the version it was judged on (`expectedVersion`): a concurrent change wins and
 * the limit is judged again on it.
 */
export class AdaptiveController {
  readonly #o: AdaptiveControllerOptions;
  readonly #now: () => number;
  readonly #tickMs: number;
  readonly #timer: NodeJS.Timeout;
  #version: RuleVersion | undefined;
  #deciding = new Set<string>();
  #round: Promise<void> = Promise.resolve();
  #closed = false;
  readonly #notJudged: Degradation;

  constructor(options: AdaptiveControllerOptions) {
    this.#o = options;
    this.#notJudged = new Degradation({ logger: options.logger, event: 'adaptive_not_judged' });
    this.#now = options.now ?? Date.now;
    this.#tickMs = options.tickMs ?? 1000;
    this.#timer = setInterval(() => {
      this.#round = this.#round.then(() => this.tick());
    }, this.#tickMs);
    this.#timer.unref();
  }

  /** The active version (the server calls this as versions become active). */
  update(version: RuleVersion): void {
    if (this.#version === undefined || version.version > this.#version.version) this.#version = version;
  }

  /** One round: every adaptive resource this server decides is judged, and moved if need be. */
  async tick(): Promise<void> {
    const v = this.#version;
    if (this.#closed || v === undefined || this.#o.hold?.() === true) return;
    // The store's current version, read once a round (when this server decides any resource)
    // and replaced by each version a move applies.
    const round: Round = {};
    let failed = false;
    for (const rule of Object.values(v.ruleSet.adaptive)) {
      try {
        await this.#judge(rule, round);
      } catch (err) {
        failed = true;
        // Judged again next round: one line a spell, with the stack when it is a bug.
        const bug = !isSluiceError(err) && !isRulesError(err);
        this.#notJudged.fail(err, (reason) => ({
          msg: `adaptive limits not judged (${reason}): limits stay as they are until a round succeeds`,
          fields: { resource: rule.resource, ...(bug ? { err } : {}) },
        }));
      }
    }
    if (!failed) this.#notJudged.recover((s) => ({ msg: `adaptive limits judged again after ${secondsText(s.lastedMs)}` }));
  }

  async #judge(rule: AdaptiveRule, round: Round): Promise<void> {
    const { demand, owner } = this.#o;
    // The leadership outlives a few rounds, so a slow round does not hand the resource over.
    const leads = await demand.lead(rule.resource, owner, Math.max(3 * this.#tickMs, 1000));
    if (leads) this.#deciding.add(rule.resource);
    else this.#deciding.delete(rule.resource);
    if (!leads) return;
    round.current ??= this.#o.ruleStore.current();
    const current = await round.current;
    const resource = current?.ruleSet.resources[rule.resource];
    const index = resource === undefined ? -1 : adaptiveLimitIndex(resource.limits, rule.limit);
    if (current === undefined || resource === undefined || index < 0) return;
    const now = this.#now();
    const lastMoveAt = await demand.lastMove(rule.resource);
    const span = Math.max(rule.demand.rejectForMs, rule.demand.idleForMs) + rule.intervalMs;
    const intervals = await demand.read(rule.resource, rule.intervalMs, ...judgedIntervals(rule, now));
    const outcomes = rule.policy === 'aimd' ? await this.#outcomesOf(rule, now, lastMoveAt) : undefined;
    const state = { limit: resource.limits[index]!.limit, ...(lastMoveAt === undefined ? {} : { lastMoveAt }) };
    const move = judgeAdaptive(rule, state, { intervals, ...(outcomes === undefined ? {} : { outcomes }) }, now);
    if (move === undefined) return;
    const text = setLimitInText(current.source, current.file, { resource: rule.resource, limit: rule.limit }, move.to);
    // Recorded before the version, so a decider that takes over meanwhile waits out the cooldown.
    await demand.recordMove(rule.resource, now, rule.cooldownMs + span);
    let applied: RuleVersion;
    try {
      applied = await this.#o.ruleStore.apply(text, {
        author: ADAPTIVE_AUTHOR,
        reason: `${rule.resource} ${move.from} -> ${move.to}: ${move.reason}`.slice(0, 256),
        file: current.file,
        expectedVersion: current.version,
      });
    } catch (err) {
      // Someone else changed the rules meanwhile: the next resource reads them again.
      delete round.current;
      if (isRulesError(err, 'SLUICE_ERR_RULE_CONFLICT')) return;
      throw err;
    }
    round.current = Promise.resolve(applied);
    this.update(applied);
    this.#o.logger?.info(
      { resource: rule.resource, from: move.from, to: move.to, version: applied.version, reason: move.reason },
      'adaptive limit moved',
    );
    this.#o.onMove?.(rule.resource, move, applied.version);
  }

  /**
   * The reported outcomes an `aimd` round judges: the whole tally buckets (1 s each) of the last
   * complete interval, at least one, ending with the last bucket that has ended; none when that
   * window began before the last move (it would mix outcomes of the old limit with the new).
   */
  async #outcomesOf(rule: AdaptiveRule, now: number, lastMoveAt: number | undefined): Promise<OutcomeTotals | undefined> {
    const source = this.#o.outcomes;
    if (source === undefined) return undefined;
    const window = outcomeWindow(rule, now);
    if (lastMoveAt !== undefined && window.from < lastMoveAt) return undefined;
    return source.outcomeTotals(rule.resource, window.ms, undefined, { complete: true });
  }

  /** The adaptive limits of the active version. */
  async status(): Promise<AdaptiveStatus[]> {
    const v = this.#version;
    if (v === undefined) return [];
    const out: AdaptiveStatus[] = [];
    for (const rule of Object.values(v.ruleSet.adaptive)) {
      const limits = v.ruleSet.resources[rule.resource]?.limits ?? [];
      const moved = limits[adaptiveLimitIndex(limits, rule.limit)];
      const limit = moved?.limit ?? 0;
      // A store that is away leaves the last move unknown: the rest of the status still answers.
      let at: number | undefined;
      let unknown = false;
      try {
        at = await this.#o.demand.lastMove(rule.resource);
      } catch {
        unknown = true;
      }
      out.push({
        resource: rule.resource,
        policy: rule.policy,
        min: rule.min,
        max: rule.max,
        limit,
        windowMs: moved?.windowMs ?? 1000,
        ...(at === undefined ? {} : { lastMoveAt: new Date(at).toISOString() }),
        ...(unknown ? { lastMoveUnknown: true as const } : {}),
        deciding: this.#deciding.has(rule.resource),
      });
    }
    return out;
  }

  /** Stops judging and resigns the leaderships this server holds. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    await this.#round;
    this.#notJudged.close();
    for (const resource of this.#deciding) await this.#o.demand.resign(resource, this.#o.owner).catch(() => undefined);
    this.#deciding.clear();
  }
}
