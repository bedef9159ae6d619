import { createHash, randomUUID } from 'node:crypto';
import {
  Degradation,
  OUTCOME_BUCKETS,
  OUTCOME_BUCKET_MS,
  cohortAt,
  isSluiceError,
  secondsText,
  type Cohort,
  type DecisionSource,
  type Limiter,
  type Logger,
  type OutcomeSource,
} from '@sluice/core';
import {
  FINISHED_STATUSES,
  RulesError,
  RulesErrorCodes,
  compileRules,
  compileRulesOffThread,
  isRulesError,
  judgeRollout,
  rampAction,
  rolloutDomainLabel,
  rolloutPercent,
  rolloutPhase,
  rolloutSplitNames,
  tallyField,
  tallyServerField,
  type CohortMeasure,
  type EnvoyDomain,
  type RolloutState,
  type RolloutStore,
  type RuleSet,
  type RuleStore,
} from '@sluice/rules';
import type { LiveRules } from '../live-rules.js';
import type { DomainSplit, RolloutRouting } from '../service/routing.js';
import { startRollout, type StartRolloutInput } from './start.js';

/** Options of {@link RolloutRunner}. */
export interface RolloutRunnerOptions {
  readonly store: RolloutStore;
  readonly ruleStore: RuleStore;
  readonly limiter: Limiter;
  readonly rules: LiveRules;
  readonly logger?: Logger;
  /** Downstream outcomes per cohort; without one, only rejection ratios are judged. */
  readonly outcomes?: OutcomeSource;
  /**
   * How often the rollout is read, counts are flushed and (by the decider) the ramp advanced
   * and judged, in ms.
   * @default 1000
   */
  readonly pollIntervalMs?: number;
  /**
   * How long the decider's leadership lasts unrenewed, in ms: another server takes over this
   * long after the decider stops.
   * @default 10000
   */
  readonly leadershipTtlMs?: number;
  /** Wall clock in ms. @default Date.now */
  readonly now?: () => number;
  /** Called when the rollout this server follows changes (and after each automatic rollback). */
  readonly onChange?: (state: RolloutState | undefined, rolledBack?: { reason: string }) => void;
}

/** The limiter's name for the candidate's limits of `resource` in rollout `id`: keys apart from the baseline's. */
export function candidateResourceName(id: string, resource: string): string {
  return `rollout@${createHash('sha256').update(`${id}\n${resource}`).digest('hex').slice(0, 40)}`;
}

/** The candidate's limits the runner put into the limiter. */
interface Installed {
  readonly id: string;
  /** Limiter name of each split resource's candidate limits. */
  readonly names: Map<string, string>;
  /** Each split Envoy domain: the candidate's version and its limits' limiter names by rule name. */
  readonly domains: Map<string, { readonly domain: EnvoyDomain; readonly names: Map<string, string> }>;
}

/** The author automatic rollbacks are recorded under. */
export const AUTO_ROLLBACK_AUTHOR = 'auto-rollback';

/**
 * Follows the fleet's rollout: reads it every `pollIntervalMs`, pushes the candidate's limits
 * of the split resources into the limiter under their own names ({@link candidateResourceName}),
 * routes each key by the stable hash of the rollout, counts decisions per cohort into the
 * store, and, on the one server holding the leadership, advances the ramp and judges the cohorts,
 * rolling back on its own when the candidate is worse.
 */
export class RolloutRunner implements RolloutRouting {
  readonly #o: RolloutRunnerOptions;
  readonly #owner = randomUUID();
  readonly #now: () => number;
  readonly #pollMs: number;
  readonly #leadershipMs: number;
  #state: RolloutState | undefined;
  /** The rollout whose candidate limits are in the limiter, and their names. */
  #installed: Installed | undefined;
  /** The names the rollout followed splits ({@link rolloutSplitNames}). */
  #splitNames: ReadonlySet<string> = new Set();
  #candidate: { id: string; ruleSet: RuleSet } | undefined;
  /** Decisions not yet flushed: rollout id + phase -> field -> count. */
  #counts = new Map<string, { id: string; phase: number; fields: Map<string, number> }>();
  #leading = false;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #closed = false;
  /** Polls failing for another reason than the rule store being away (that one it logs itself). */
  readonly #failing: Degradation;

  constructor(options: RolloutRunnerOptions) {
    this.#o = options;
    this.#failing = new Degradation({ logger: options.logger, event: 'rollout_not_followed' });
    this.#now = options.now ?? Date.now;
    this.#pollMs = options.pollIntervalMs ?? 1000;
    this.#leadershipMs = options.leadershipTtlMs ?? 10_000;
  }

  /** The rollout as last read (running or finished), if any. */
  get state(): RolloutState | undefined {
    return this.#state;
  }

  /** True while this server holds the decider's leadership. */
  get leading(): boolean {
    return this.#leading;
  }

  /** The share of keys on the candidate right now, as this server applies it. */
  get percent(): number {
    return this.#splitting() ? rolloutPercent(this.#state) : 0;
  }

  /** Starts polling (and takes part in the decider's election). */
  start(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = setInterval(() => this.kick(), this.#pollMs);
    this.#timer.unref();
    this.kick();
  }

  /** Runs a poll now (or right after the one in progress). */
  kick(): void {
    if (this.#closed || this.#running) return;
    this.#running = this.tick()
      .then(
        (asked) => {
          // A poll whose leadership could not be asked for is no recovery.
          if (asked) this.#failing.recover((s) => ({ msg: `rollout followed again after ${secondsText(s.lastedMs)}` }));
        },
        (err: unknown) => this.#pollFailed(err),
      )
      .finally(() => {
        this.#running = undefined;
      });
  }

  /**
   * The cohort of `key` of `resource` in the running rollout (also while a promoted candidate
   * is watched), or undefined when `resource` is not being rolled out. Outcome reports are
   * tagged with it.
   */
  cohortOf(resource: string, key?: string): Cohort | undefined {
    const s = this.#state;
    if (s === undefined || !this.#splitNames.has(resource)) return undefined;
    if (s.status === 'watching') return 'candidate';
    if (!this.#splitting()) return undefined;
    return cohortAt(rolloutPercent(s), s.id, resource, key);
  }

  /** The limiter resource that decides `key` of `resource`: the candidate's for its cohort. */
  route(resource: string, key?: string): string {
    if (this.#installed === undefined || this.cohortOf(resource, key) !== 'candidate') return resource;
    return this.#installed.names.get(resource) ?? resource;
  }

  /** How descriptors of Envoy domain `domain` are split now, or undefined when they are not. */
  domain(domain: string): DomainSplit | undefined {
    const label = rolloutDomainLabel(domain);
    if (this.#state?.status === 'watching' && this.#splitNames.has(label)) {
      return {
        candidate: undefined,
        names: new Map(),
        cohortOf: () => 'candidate',
        observe: (key, allowed, source) => this.observe(label, key, allowed, source),
      };
    }
    const installed = this.#installed?.domains.get(domain);
    if (installed === undefined || !this.#splitting()) return undefined;
    const percent = rolloutPercent(this.#state);
    const id = this.#installed!.id;
    return {
      candidate: installed.domain,
      names: installed.names,
      cohortOf: (key) => cohortAt(percent, id, label, key),
      observe: (key, allowed, source) => this.observe(label, key, allowed, source),
    };
  }

  /** The split in force here, for remote clients (their fallback splits keys the same way). */
  split(): { id: string; percent: number; names: ReadonlyMap<string, string> } | undefined {
    if (!this.#splitting() || this.#installed === undefined) return undefined;
    return { id: this.#installed.id, percent: rolloutPercent(this.#state), names: this.#installed.names };
  }

  /**
   * Counts one decision of a split resource for its cohort (flushed to the store each poll).
   * Decisions of the store-failure policy are not counted: a cold server's or an outage's
   * denials judge the store, not the rules, and would count against whichever cohort they fell in.
   */
  observe(resource: string, key: string | undefined, allowed: boolean, source?: DecisionSource): void {
    if (source === 'fallback') return;
    const s = this.#state;
    const cohort = this.cohortOf(resource, key);
    if (s === undefined || cohort === undefined) return;
    const phase = rolloutPhase(s);
    const k = `${s.id}:${phase}`;
    let c = this.#counts.get(k);
    if (c === undefined) {
      c = { id: s.id, phase, fields: new Map() };
      this.#counts.set(k, c);
    }
    const bump = (f: string) => c.fields.set(f, (c.fields.get(f) ?? 0) + 1);
    bump(tallyField(cohort, resource, 'decided'));
    if (!allowed) bump(tallyField(cohort, resource, 'denied'));
  }

  /**
   * One poll: read the rollout, apply it, flush counts, and decide if this server leads. False
   * when the leadership could not be asked for (the rest of the poll went through).
   */
  async tick(): Promise<boolean> {
    const state = await this.#o.store.read();
    await this.#compileCandidate(state);
    this.#follow(state);
    await this.#flush();
    let asked = true;
    const lead = async () => {
      try {
        return await this.#o.store.lead(this.#owner, this.#leadershipMs);
      } catch (err) {
        this.#pollFailed(err);
        asked = false;
        return false;
      }
    };
    this.#leading = state !== undefined && !FINISHED_STATUSES.includes(state.status) && (await lead());
    if (this.#leading && state !== undefined) await this.#decide(state);
    return asked;
  }

  /** Starts a rollout of `input.text` over the current version (see {@link startRollout}). */
  async begin(input: StartRolloutInput): Promise<RolloutState> {
    const state = await startRollout(this.#o.store, this.#o.ruleStore, input, this.#now());
    await this.#compileCandidate(state);
    this.#follow(state);
    return state;
  }

  /** Holds the share where it is: the ramp waits (the judge still watches). */
  pause(author: string, reason: string): Promise<RolloutState> {
    return this.#act(['running'], (s) => ({ ...s, status: 'paused', note: `paused by ${author}: ${reason}` }));
  }

  /** Lets a paused ramp go on; the step's hold starts again. */
  resume(author: string, reason: string): Promise<RolloutState> {
    return this.#act(['paused'], (s) => ({
      ...s,
      status: 'running',
      stepStartedAtMs: this.#now(),
      note: `resumed by ${author}: ${reason}`,
    }));
  }

  /** Applies the candidate to every key now: it becomes the next rule version, then is watched. */
  async promote(author: string, reason: string): Promise<RolloutState> {
    const s = await this.#read(['running', 'paused']);
    return this.#promote(s, `promoted by ${author}: ${reason}`);
  }

  /** Ends the rollout: every key goes back to the baseline version (no version is recorded). */
  abort(author: string, reason: string): Promise<RolloutState> {
    return this.#act(['running', 'paused'], (s) => ({ ...s, status: 'aborted', note: `aborted by ${author}: ${reason}` }));
  }

  /** Stops polling, resigns the leadership and removes the candidate limits from the limiter. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    await this.#running;
    this.#failing.close();
    await this.#flush().catch(() => undefined);
    if (this.#leading) await this.#o.store.resign(this.#owner).catch(() => undefined);
    this.#uninstall();
  }

  /** Whether keys are split now: a running or paused rollout over the version in force here. */
  #splitting(): boolean {
    const s = this.#state;
    return (
      s !== undefined &&
      (s.status === 'running' || s.status === 'paused') &&
      this.#installed?.id === s.id &&
      this.#o.rules.version?.version === s.baseline
    );
  }

  #follow(state: RolloutState | undefined): void {
    const before = this.#state;
    if (before !== undefined && state !== undefined && before.id === state.id && before.revision > state.revision) return;
    this.#state = state;
    this.#splitNames = new Set(state === undefined ? [] : rolloutSplitNames(state));
    const split = state !== undefined && (state.status === 'running' || state.status === 'paused');
    if (split && this.#installed?.id !== state.id) this.#install(state);
    if (!split) this.#uninstall();
    if (before?.id !== state?.id || before?.revision !== state?.revision) this.#o.onChange?.(state);
  }

  #install(s: RolloutState): void {
    this.#uninstall();
    const ruleSet = this.#candidateOf(s);
    const names = new Map<string, string>();
    for (const resource of s.resources) {
      const config = ruleSet.resources[resource];
      if (config === undefined) continue;
      const name = candidateResourceName(s.id, resource);
      this.#o.limiter.setLimits(name, config);
      names.set(resource, name);
    }
    const domains: Installed['domains'] = new Map();
    for (const name of s.domains ?? []) {
      const domain = ruleSet.domains[name];
      if (domain === undefined) continue;
      const limits = new Map<string, string>();
      for (const [rule, config] of Object.entries(domain.resources())) {
        const limiterName = candidateResourceName(s.id, rule);
        this.#o.limiter.setLimits(limiterName, config);
        limits.set(rule, limiterName);
      }
      domains.set(name, { domain, names: limits });
    }
    this.#installed = { id: s.id, names, domains };
    this.#o.logger?.info(
      { rollout: s.id, baseline: s.baseline, resources: s.resources, domains: s.domains ?? [] },
      'rollout candidate limits loaded',
    );
  }

  #uninstall(): void {
    if (this.#installed === undefined) return;
    for (const name of this.#installed.names.values()) this.#o.limiter.removeLimits(name);
    for (const d of this.#installed.domains.values()) for (const name of d.names.values()) this.#o.limiter.removeLimits(name);
    this.#installed = undefined;
  }

  /** Compiles a new rollout's candidate off the event loop, before {@link #follow} installs it. */
  async #compileCandidate(s: RolloutState | undefined): Promise<void> {
    if (s === undefined || this.#candidate?.id === s.id || FINISHED_STATUSES.includes(s.status)) return;
    const ruleSet = await compileRulesOffThread(s.candidate.source, { file: s.candidate.file });
    this.#candidate = { id: s.id, ruleSet };
  }

  #candidateOf(s: RolloutState): RuleSet {
    if (this.#candidate?.id !== s.id) {
      this.#candidate = { id: s.id, ruleSet: compileRules(s.candidate.source, { file: s.candidate.file }) };
    }
    return this.#candidate.ruleSet;
  }

  /** Adds the counts to the store; counts it did not take are kept for the next poll. */
  async #flush(): Promise<void> {
    const pending = [...this.#counts.entries()];
    this.#counts = new Map();
    // Each poll that adds counts says whose they are: the judge then knows how many servers' it has.
    for (const [, c] of pending) c.fields.set(tallyServerField(this.#owner), 1);
    const results = await Promise.allSettled(pending.map(([, c]) => this.#o.store.addTallies(c.id, c.phase, c.fields)));
    const failed = results.findIndex((r) => r.status === 'rejected');
    if (failed < 0) return;
    results.forEach((r, i) => {
      if (r.status === 'fulfilled') return;
      const [k, c] = pending[i]!;
      const now = this.#counts.get(k);
      if (now === undefined) this.#counts.set(k, c);
      else for (const [f, n] of c.fields) now.fields.set(f, (now.fields.get(f) ?? 0) + n);
    });
    throw (results[failed] as PromiseRejectedResult).reason;
  }

  /**
   * A poll (or a leadership attempt) failed; polled again at the next interval. The rule store
   * logs its own unavailability as one spell (its RuleStoreHealth): that is not said again here.
   * Anything else is one spell of its own, with the stack when it is not a known error (a bug).
   */
  #pollFailed(err: unknown): void {
    if (isRulesError(err, RulesErrorCodes.RULE_STORE_UNAVAILABLE)) return;
    const bug = !(err instanceof RulesError) && !isSluiceError(err);
    this.#failing.fail(err, (reason) => ({
      msg: `rollout not followed (${reason}): this server keeps the rollout as it last read it until a poll succeeds`,
      ...(bug ? { fields: { err } } : {}),
    }));
  }

  async #decide(s: RolloutState): Promise<void> {
    const now = this.#now();
    if (s.status === 'running' || s.status === 'paused') {
      const current = (await this.#o.ruleStore.current())?.version;
      if (current !== s.baseline) {
        await this.#write(s, { ...s, status: 'aborted', note: `version ${current} was applied during the rollout` });
        return;
      }
    }
    const { measures, servers } = await this.#measure(s, now);
    const verdict = judgeRollout(measures, s.thresholds);
    if (verdict.rollback) {
      // What was judged: the fleet's decisions as counted so far (each server adds its own once
      // per poll), or the outcomes reported since the step began.
      const span = `${secondsText(now - s.stepStartedAtMs)} of step ${s.step + 1}`;
      const what =
        verdict.measure === 'rejections'
          ? `decisions counted by ${servers} server${servers === 1 ? '' : 's'} in ${span}`
          : `outcomes reported in ${span}`;
      await this.#rollBack(s, `${verdict.reason} (${what})`);
      return;
    }
    const action = rampAction(s, now);
    if (action === 'advance') {
      await this.#write(s, { ...s, step: s.step + 1, stepStartedAtMs: now, note: `step ${s.step + 2} of ${s.steps.length}` });
    } else if (action === 'promote') {
      await this.#promote(s, 'promoted: every step held without a rollback');
    } else if (action === 'complete') {
      await this.#write(s, {
        ...s,
        status: 'completed',
        note: `watched ${s.watchMs} ms after the full apply without a rollback`,
      });
    }
  }

  async #measure(s: RolloutState, now: number): Promise<{ measures: CohortMeasure[]; servers: number }> {
    const tallies = await this.#o.store.tallies(s.id, rolloutPhase(s));
    const servers = [...tallies.keys()].filter((f) => f.startsWith(tallyServerField(''))).length;
    // The store keeps outcome tallies for a bounded span: a longer step is judged on its latest part.
    const windowMs = Math.min(OUTCOME_BUCKETS * OUTCOME_BUCKET_MS, Math.max(1000, Math.round(now - s.stepStartedAtMs)));
    const n = (f: string) => tallies.get(f) ?? 0;
    const measures = await Promise.all(
      rolloutSplitNames(s).map(async (resource): Promise<CohortMeasure> => {
        const tally = (c: Cohort) => ({
          decided: n(tallyField(c, resource, 'decided')),
          denied: n(tallyField(c, resource, 'denied')),
        });
        const measure = { resource, baseline: tally('baseline'), candidate: tally('candidate') };
        // Downstream outcomes are reported per resource; a domain is judged on its rejections.
        const outcomes = s.resources.includes(resource) ? this.#o.outcomes : undefined;
        if (outcomes === undefined) return measure;
        const [baselineOutcomes, candidateOutcomes] = await Promise.all([
          outcomes.outcomeTotals(resource, windowMs, 'baseline'),
          outcomes.outcomeTotals(resource, windowMs, 'candidate'),
        ]);
        return { ...measure, baselineOutcomes, candidateOutcomes };
      }),
    );
    return { measures, servers };
  }

  async #rollBack(s: RolloutState, reason: string): Promise<void> {
    // The rollback is a version of its own, so history says who (auto-rollback) and why.
    const v = await this.#o.ruleStore.rollback(s.baseline, { author: AUTO_ROLLBACK_AUTHOR, reason: reason.slice(0, 256) });
    await this.#o.rules.update(v);
    const next = await this.#write(s, { ...s, status: 'rolled_back', rollbackVersion: v.version, note: reason });
    this.#o.logger?.warn({ rollout: s.id, version: v.version, reason }, 'rollout rolled back automatically');
    if (next !== undefined) this.#o.onChange?.(next, { reason });
  }

  async #promote(s: RolloutState, note: string): Promise<RolloutState> {
    const v = await this.#o.ruleStore.apply(s.candidate.source, {
      author: s.author,
      reason: `rollout ${s.id} (${s.reason})`.slice(0, 256),
      file: s.candidate.file,
      expectedVersion: s.baseline,
    });
    await this.#o.rules.update(v);
    const done = s.watchMs === 0;
    const next = await this.#write(s, {
      ...s,
      status: done ? 'completed' : 'watching',
      version: v.version,
      stepStartedAtMs: this.#now(),
      note,
    });
    return next ?? (await this.#read([]));
  }

  async #read(statuses: readonly RolloutState['status'][]): Promise<RolloutState> {
    const s = await this.#o.store.read();
    if (s === undefined) throw new RulesError(RulesErrorCodes.ROLLOUT_NOT_FOUND, 'no rollout was started');
    if (statuses.length > 0 && !statuses.includes(s.status)) {
      throw new RulesError(
        RulesErrorCodes.ROLLOUT_CONFLICT,
        `the rollout is ${s.status}; this needs it ${statuses.join(' or ')}`,
      );
    }
    return s;
  }

  async #act(statuses: readonly RolloutState['status'][], change: (s: RolloutState) => RolloutState): Promise<RolloutState> {
    const s = await this.#read(statuses);
    const next = await this.#o.store.write({ ...change(s), updatedAtMs: this.#now() }, s.revision);
    this.#follow(next);
    return next;
  }

  /** The decider's write: losing the race to an operator is fine, the next poll sees theirs. */
  async #write(s: RolloutState, next: RolloutState): Promise<RolloutState | undefined> {
    try {
      const written = await this.#o.store.write({ ...next, updatedAtMs: this.#now() }, s.revision);
      this.#follow(written);
      this.#o.logger?.info({ rollout: s.id, status: written.status, step: written.step, note: written.note }, 'rollout changed');
      return written;
    } catch (err) {
      if (err instanceof RulesError && err.code === RulesErrorCodes.ROLLOUT_CONFLICT) return undefined;
      throw err;
    }
  }
}
