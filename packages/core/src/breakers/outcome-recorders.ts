import type { CircuitState } from './circuit-breaker.js';
import type { Clock } from '../shared/clock.js';
import { Degradation, secondsText } from '../shared/degradation.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import type { Logger } from '../shared/log.js';
import { OutcomeRecorder, type OutcomeRecorderStats } from './outcome-recorder.js';
import type { OutcomeTotals, TallyRead } from './outcomes.js';
import type { CompiledResource } from '../admission/resource.js';
import { storeCallTimer, timedCall } from '../store/store-calls.js';
import { isOutcomeStore, type LimitStore, type OutcomeStore, type StoreCall } from '../store/store.js';

/** Slow-call threshold of outcomes tallied for a resource without a breaker, in ms. */
const DEFAULT_SLOW_MS = 1000;
/** How long outcomes of a resource without a fleet breaker wait before being sent, in ms. */
const TALLY_SYNC_MS = 1000;

/** Settings of {@link OutcomeRecorders}. */
export interface OutcomeRecordersSettings {
  readonly store: LimitStore;
  readonly clock: Clock;
  /** Tally every resource's outcomes in the store, not only those of fleet breakers. */
  readonly tallyAll: boolean;
  readonly onStateChange?: (resource: string, from: CircuitState, to: CircuitState) => void;
  readonly onError?: (resource: string, error: unknown) => void;
  /** Told of every report and read of tallies that left the process, with its duration. */
  readonly onStoreCall?: (call: StoreCall) => void;
  /** Where a spell of failed reports is logged (one line when it starts, one when it ends). */
  readonly logger?: Logger | undefined;
}

/**
 * A limiter's {@link OutcomeRecorder}s, one per resource that sends outcomes to the store (a
 * resource with a fleet-wide breaker, or every resource with `tallyOutcomes`). A rule update that
 * changes a fleet breaker's settings starts a new recorder; the old one sends what it holds.
 */
export class OutcomeRecorders {
  readonly #s: OutcomeRecordersSettings;
  readonly #store: OutcomeStore | undefined;
  /** Each resource's recorder, with the fleet-breaker settings it was made for (as compiled). */
  readonly #recorders = new Map<string, { recorder: OutcomeRecorder; made: CompiledResource['fleetBreaker'] }>();
  readonly #closing = new Set<Promise<void>>();
  /** Reports failing: one spell for every resource's recorder. */
  readonly #failing: Degradation;

  constructor(settings: OutcomeRecordersSettings) {
    this.#s = settings;
    this.#failing = new Degradation({ logger: settings.logger, clock: settings.clock, event: 'outcome_reports_failing' });
    const store = isOutcomeStore(settings.store) ? settings.store : undefined;
    const timer = storeCallTimer(settings.store, settings.clock, settings.onStoreCall);
    this.#store =
      store === undefined || timer === undefined
        ? store
        : {
            outcomes: (request) => timedCall(timer, settings.clock, 'outcomes', () => store.outcomes(request)),
            outcomeTotals: (resource, windowMs, cohort, read) =>
              timedCall(timer, settings.clock, 'outcomeTotals', () => store.outcomeTotals(resource, windowMs, cohort, read)),
          };
    if (settings.tallyAll && this.#store === undefined) {
      throw new SluiceError(
        ErrorCodes.INVALID_OPTIONS,
        `tallyOutcomes: the ${settings.store.name} store keeps no outcome tallies`,
        {
          field: 'tallyOutcomes',
        },
      );
    }
  }

  /** Throws unless the store can keep the resource's fleet breaker. */
  check(r: CompiledResource): void {
    if (r.fleetBreaker !== undefined && this.#store === undefined) {
      throw new SluiceError(
        ErrorCodes.INVALID_OPTIONS,
        `resources.${r.name}.breaker.scope: the ${this.#s.store.name} store keeps no fleet-wide breakers`,
        { field: `resources.${r.name}.breaker.scope` },
      );
    }
  }

  /** The recorder of `r`, made on first use; undefined when its outcomes stay in process. */
  of(r: CompiledResource): OutcomeRecorder | undefined {
    const store = this.#store;
    if (store === undefined || (r.fleetBreaker === undefined && !this.#s.tallyAll)) return undefined;
    const had = this.#recorders.get(r.name);
    // Every admission asks: the settings compiled with the resource are compared by identity,
    // and by value only once after a rule update recompiled them.
    if (had !== undefined && had.made === r.fleetBreaker) return had.recorder;
    if (had !== undefined && JSON.stringify(had.recorder.breaker) === JSON.stringify(r.fleetBreaker?.policy)) {
      had.made = r.fleetBreaker;
      return had.recorder;
    }
    if (had !== undefined) this.#retire(had.recorder);
    const recorder = new OutcomeRecorder({
      store,
      resource: r.name,
      clock: this.#s.clock,
      syncMs: r.fleetBreaker?.syncMs ?? TALLY_SYNC_MS,
      slowCallDurationMs: r.fleetBreaker?.slowCallDurationMs ?? DEFAULT_SLOW_MS,
      ...(r.fleetBreaker === undefined ? {} : { breaker: r.fleetBreaker.policy }),
      onStateChange: (from, to) => this.#s.onStateChange?.(r.name, from, to),
      onError: (e) => {
        this.#s.onError?.(r.name, e);
        this.#failing.fail(e, (reason) => ({
          msg: `outcome reports not taken by store ${this.#s.store.name} (${reason}): their outcomes are dropped (counted) and fleet breakers keep their last known state until it takes them`,
          fields: { store: this.#s.store.name, resource: r.name },
        }));
      },
      onSent: () =>
        this.#failing.recover((spell) => ({
          msg: `outcome reports taken by store ${this.#s.store.name} again after ${secondsText(spell.lastedMs)} (${spell.repeats + 1} reports failed meanwhile)`,
          fields: { store: this.#s.store.name },
        })),
    });
    this.#recorders.set(r.name, { recorder, made: r.fleetBreaker });
    return recorder;
  }

  /** The fleet breaker of `resource` as this process sees it (undefined before its first use). */
  stats(resource: string): OutcomeRecorderStats | undefined {
    return this.#recorders.get(resource)?.recorder.stats;
  }

  /** Forgets a removed resource (what its recorder holds is sent). */
  remove(resource: string): void {
    const had = this.#recorders.get(resource);
    if (had !== undefined) this.#retire(had.recorder);
    this.#recorders.delete(resource);
  }

  /** Tallies from the store (see `OutcomeSource`). */
  totals(resource: string, windowMs: number, cohort?: string, read?: TallyRead): Promise<OutcomeTotals> {
    if (this.#store === undefined) {
      return Promise.reject(
        new SluiceError(ErrorCodes.INVALID_OPTIONS, `the ${this.#s.store.name} store keeps no outcome tallies`),
      );
    }
    return this.#store.outcomeTotals(resource, windowMs, cohort, read);
  }

  /** Sends everything pending and stops every recorder. */
  async close(): Promise<void> {
    for (const r of this.#recorders.values()) this.#retire(r.recorder);
    this.#recorders.clear();
    while (this.#closing.size > 0) await Promise.all(this.#closing);
    this.#failing.close();
  }

  #retire(recorder: OutcomeRecorder): void {
    const closing = recorder.close().finally(() => this.#closing.delete(closing));
    this.#closing.add(closing);
  }
}
