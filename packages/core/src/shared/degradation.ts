import { systemClock, type Clock, type TimerHandle } from './clock.js';
import { errorSummary, reasonOf, type Logger } from './log.js';

/** A degradation while it lasts (or as it ended), for the lines that describe it. */
export interface DegradationSpell {
  /** How long it has lasted, in ms. */
  readonly lastedMs: number;
  /** Failures counted after the first (not logged one by one). */
  readonly repeats: number;
  /** The latest failure's reason (`ECONNREFUSED 127.0.0.1:6379`, see {@link reasonOf}). */
  readonly reason: string;
}

/** One log line: its message and the fields beside it. */
export interface DegradationLine {
  readonly msg: string;
  readonly fields?: Record<string, unknown>;
}

/** Options of {@link Degradation}. */
export interface DegradationOptions {
  /** Where its lines go; undefined for nowhere. */
  readonly logger: Logger | undefined;
  /**
   * The `event` field of its lines, a stable name for log queries: `<event>` when it starts and
   * in summaries, `<event>_ended` when it ends (e.g. `store_unreachable`).
   */
  readonly event: string;
  /** @default systemClock */
  readonly clock?: Clock;
  /** Between summary lines while it lasts, in ms; 0 for none. @default 30000 */
  readonly summaryIntervalMs?: number;
  /**
   * The summary line, logged once an interval while it lasts if anything repeated meanwhile.
   * @default the first line's message, with how long it has lasted and the repeats
   */
  readonly summary?: (spell: DegradationSpell) => DegradationLine;
}

/** Seconds for people: one decimal below a minute. */
export function secondsText(ms: number): string {
  const s = ms / 1000;
  return s < 60 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`;
}

/**
 * One degraded condition (a store that cannot be reached, reports that are not delivered) in the
 * log the way an operator reads it: ONE warning when it starts, saying what happened and what is
 * done about it; failures while it lasts are counted, not logged (a summary line at most once an
 * interval); ONE line when it ends, saying how long it lasted. Lines carry the error's code,
 * message and address ({@link errorSummary}), never a stack: a condition is not a bug.
 *
 * @example
 * const away = new Degradation({ logger, event: 'rule_store_unreachable' });
 * away.fail(err, () => ({ msg: `rule store unreachable (${reasonOf(err)}): the rules in force stay` }));
 * away.recover((s) => ({ msg: `rule store answers again after ${secondsText(s.lastedMs)}` }));
 */
export class Degradation {
  readonly #o: DegradationOptions;
  readonly #clock: Clock;
  readonly #intervalMs: number;
  #since: number | undefined;
  #first: DegradationLine | undefined;
  #repeats = 0;
  #summarized = 0;
  #reason = '';
  #timer: TimerHandle | undefined;
  #spells = 0;

  constructor(options: DegradationOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#intervalMs = options.summaryIntervalMs ?? 30_000;
  }

  /** True from a failure until the recovery. */
  get active(): boolean {
    return this.#since !== undefined;
  }

  /** How many times it began (since this object was made). */
  get spells(): number {
    return this.#spells;
  }

  /** The current spell, if it lasts. */
  get spell(): DegradationSpell | undefined {
    if (this.#since === undefined) return undefined;
    return { lastedMs: this.#clock.now() - this.#since, repeats: this.#repeats, reason: this.#reason };
  }

  /**
   * A failure: the first of a spell is logged (`line` builds it, given the reason); later ones
   * are counted. True when this one began the spell.
   */
  fail(error: unknown, line: (reason: string) => DegradationLine): boolean {
    this.#reason = reasonOf(error);
    if (this.#since !== undefined) {
      this.#repeats++;
      return false;
    }
    this.#since = this.#clock.now();
    this.#spells++;
    this.#repeats = 0;
    this.#summarized = 0;
    const first = line(this.#reason);
    this.#first = first;
    this.#o.logger?.warn({ event: this.#o.event, error: errorSummary(error), ...first.fields }, first.msg);
    this.#schedule();
    return true;
  }

  /** A failure while the spell lasts: counted, its reason kept for the summary; nothing if not degraded. */
  repeat(error: unknown): void {
    if (this.#since === undefined) return;
    this.#reason = reasonOf(error);
    this.#repeats++;
  }

  /** The condition is over: logs `line` (given the spell) and stops the summaries. False if it was not degraded. */
  recover(line: (spell: DegradationSpell) => DegradationLine): boolean {
    const spell = this.spell;
    if (spell === undefined) return false;
    this.#end();
    const last = line(spell);
    this.#o.logger?.info(
      { event: `${this.#o.event}_ended`, lastedMs: Math.round(spell.lastedMs), repeats: spell.repeats, ...last.fields },
      last.msg,
    );
    return true;
  }

  /** Stops the summaries (the spell, if any, is left unfinished: the owner is closing). */
  close(): void {
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#timer = undefined;
  }

  #end(): void {
    this.close();
    this.#since = undefined;
    this.#first = undefined;
  }

  #schedule(): void {
    if (this.#intervalMs <= 0) return;
    this.#timer = this.#clock.setTimer(() => this.#summarize(), this.#intervalMs, true);
  }

  #summarize(): void {
    this.#timer = undefined;
    const spell = this.spell;
    if (spell === undefined) return;
    if (spell.repeats > this.#summarized) {
      this.#summarized = spell.repeats;
      const line = this.#o.summary?.(spell) ?? {
        msg: `${this.#first?.msg ?? this.#o.event} (still, after ${secondsText(spell.lastedMs)}; ${spell.repeats} more failures, not logged one by one)`,
        fields: this.#first?.fields,
      };
      this.#o.logger?.warn(
        {
          event: this.#o.event,
          lastedMs: Math.round(spell.lastedMs),
          repeats: spell.repeats,
          reason: spell.reason,
          ...line.fields,
        },
        line.msg,
      );
    }
    this.#schedule();
  }
}
