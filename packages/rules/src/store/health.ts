import { Degradation, secondsText, type Logger } from '@sluice/core';
import { RulesErrorCodes, isRulesError } from '../errors.js';

/**
 * Whether a rule store answers, as its log tells it: ONE line when it stops answering (what
 * failed, and that the rules and the rollout in force stay), ONE line when it answers again, and
 * nothing per failed read, poll, reconnect attempt or subscription meanwhile (a summary every
 * 30 s at most). The store, its watch, its change subscription and its rollout store share one,
 * so an outage is one spell however many of them notice it. Callers of a store do not log its
 * `SLUICE_ERR_RULE_STORE_UNAVAILABLE` errors again.
 */
export class RuleStoreHealth {
  readonly #away: Degradation;
  readonly #subject: string;

  /** `subject` names the store in its lines: `rule store redis at 10.0.0.5:6379`. */
  constructor(logger: Logger | undefined, subject: string) {
    this.#subject = subject;
    this.#away = new Degradation({ logger, event: 'rule_store_unreachable' });
  }

  /** True while the store is not answering. */
  get failing(): boolean {
    return this.#away.active;
  }

  /** A read, write or connection failed: the first of a spell is logged, later ones counted. */
  failed(err: unknown): void {
    // A store that answers with data it cannot read is not away, but its rules stay all the same.
    const away = !(err instanceof Error) || isRulesError(err, RulesErrorCodes.RULE_STORE_UNAVAILABLE) || !isRulesError(err);
    this.#away.fail(err, (reason) => ({
      msg: `${this.#subject} ${away ? 'unreachable' : 'cannot be read'} (${reason}): the rules and the rollout in force stay until it answers`,
    }));
  }

  /** A failure that only counts towards a spell under way (a secondary connection's). */
  repeat(err: unknown): void {
    this.#away.repeat(err);
  }

  /** The store answered: a spell is over. */
  answered(): void {
    this.#away.recover((spell) => ({
      msg: `${this.#subject} answers again after ${secondsText(spell.lastedMs)}: rule changes are followed again (${spell.repeats} more failures meanwhile)`,
    }));
  }

  /** Stops the summaries. */
  close(): void {
    this.#away.close();
  }
}
