import { Degradation, secondsText, type Clock, type Logger, type OutcomeReport, type TimerHandle } from '@sluice/core';
import { decodeError, decodeResults, isErrorAnswer } from '@sluice/core/wire';
import type { Transport } from './transport.js';

/** Settings of an {@link OutcomeReporter}. */
export interface OutcomeReporterSettings {
  readonly transport: Transport;
  readonly clock: Clock;
  /** Most reports in one request (the service's batch bound). */
  readonly maxBatch: number;
  /** Longest time a report waits before being sent, in ms. */
  readonly flushMs: number;
  /** Most reports queued; more are dropped (and counted). */
  readonly maxQueued: number;
  /** Timeout of one request, in ms. */
  readonly timeoutMs: () => number;
  /** The bearer token of reports, when it is not the transport's (`outcomesToken`). */
  readonly token?: string | undefined;
  /** Where a spell of undelivered reports is logged (one line when it starts, one when it ends). */
  readonly logger?: Logger | undefined;
}

/** What a reporter did, for metrics. */
export interface OutcomeReporterStats {
  /** Reports the service took. */
  readonly sent: number;
  /** Reports dropped: the queue was full, or their request failed. */
  readonly dropped: number;
  /** Reports the service refused one by one (a bad item, an unknown resource). */
  readonly refused: number;
}

/**
 * Sends outcomes of downstream calls to the service (`POST /v1/outcomes`) in batches: a report
 * waits at most `flushMs`, a full batch goes at once, at most `maxQueued` wait (more are dropped
 * and counted: outcomes are observations, never worth holding a caller for). `close()` sends
 * what is queued.
 */
export class OutcomeReporter {
  readonly #s: OutcomeReporterSettings;
  #queue: OutcomeReport[] = [];
  #timer: TimerHandle | undefined;
  readonly #inFlight = new Set<Promise<void>>();
  #closed = false;
  #sent = 0;
  #dropped = 0;
  #refused = 0;
  /** Requests failing: one spell in the log, however many batches fail meanwhile. */
  readonly #failing: Degradation;
  /** Reports dropped since the spell began. */
  #droppedInSpell = 0;

  constructor(settings: OutcomeReporterSettings) {
    this.#s = settings;
    this.#failing = new Degradation({ logger: settings.logger, clock: settings.clock, event: 'outcome_reports_undelivered' });
  }

  /** Counters for metrics. */
  get stats(): OutcomeReporterStats {
    return { sent: this.#sent, dropped: this.#dropped, refused: this.#refused };
  }

  /** Queues a report; false when it was dropped (the queue is full or the reporter closed). */
  report(report: OutcomeReport): boolean {
    if (this.#closed || this.#queue.length >= this.#s.maxQueued) {
      this.#dropped++;
      return false;
    }
    this.#queue.push(report);
    if (this.#queue.length >= this.#s.maxBatch) this.#flush();
    else this.#timer ??= this.#s.clock.setTimer(() => this.#flush(), this.#s.flushMs, true);
    return true;
  }

  /** Sends everything queued and waits for every request in flight. */
  async flush(): Promise<void> {
    this.#flush();
    await Promise.allSettled([...this.#inFlight]);
  }

  /** Sends what is queued, then takes no more reports. */
  async close(): Promise<void> {
    await this.flush();
    this.#closed = true;
    this.#failing.close();
  }

  #flush(): void {
    if (this.#timer !== undefined) this.#s.clock.clearTimer(this.#timer);
    this.#timer = undefined;
    while (this.#queue.length > 0) {
      const batch = this.#queue.splice(0, this.#s.maxBatch);
      const sent = this.#send(batch).finally(() => this.#inFlight.delete(sent));
      this.#inFlight.add(sent);
    }
  }

  async #send(batch: readonly OutcomeReport[]): Promise<void> {
    try {
      const answer = await this.#s.transport.call('/v1/outcomes', {
        body: { items: batch },
        timeoutMs: this.#s.timeoutMs(),
        ...(this.#s.token === undefined ? {} : { token: this.#s.token }),
      });
      if (answer.status !== 200) throw decodeError(answer.body, answer.status);
      for (const r of decodeResults(answer.body, batch.length)) {
        if (isErrorAnswer(r)) this.#refused++;
        else this.#sent++;
      }
      this.#failing.recover((spell) => ({
        msg: `sluice client: outcome reports delivered again after ${secondsText(spell.lastedMs)} (${this.#droppedInSpell} dropped meanwhile)`,
        fields: { dropped: this.#droppedInSpell },
      }));
    } catch (err) {
      this.#dropped += batch.length;
      // Every batch fails alike while it lasts: said once, not per batch.
      if (this.#failing.fail(err, (reason) => ({ msg: undeliveredLine(reason, err) }))) this.#droppedInSpell = 0;
      this.#droppedInSpell += batch.length;
    }
  }
}

/** The line of a spell of undelivered reports: what failed, and what happens to the reports. */
function undeliveredLine(reason: string, err: unknown): string {
  const refused = (err as { code?: unknown }).code === 'SLUICE_ERR_UNAUTHORIZED';
  const fix = refused ? " (set outcomesToken to the service's --outcomes-token)" : '';
  return `sluice client: outcome reports not delivered (${reason})${fix}: they are dropped (counted) until the service takes them`;
}
