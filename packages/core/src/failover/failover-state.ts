import type { Clock, TimerHandle } from '../shared/clock.js';
import type { Decision, LimitStatus } from '../shared/decision.js';
import { ErrorCodes, SluiceError, invalid } from '../shared/errors.js';
import { FailureStreak } from './failure-streak.js';
import { Degradation, secondsText } from '../shared/degradation.js';
import type { Logger } from '../shared/log.js';
import type { CompiledLimit } from '../shared/policy.js';

/**
 * What a resource does while its store is unavailable:
 * - `local`: decide on an in-process limiter sized to a fair share of the global limit
 *   (limit / live clients), so the fleet as a whole stays near the global limit;
 * - `open`: admit everything (the downstream matters less than availability);
 * - `closed`: deny everything (the downstream must never be overrun).
 */
export type StoreFailurePolicy = 'local' | 'open' | 'closed';

export const STORE_FAILURE_POLICIES: readonly StoreFailurePolicy[] = ['local', 'open', 'closed'];

/** Resources named per exception in {@link describePolicies}; the rest are counted. */
const NAMED_EXCEPTIONS = 3;

/**
 * The store-failure policies in force, as a log line names them: `the 'local' policy`, with the
 * resources that differ from `defaultPolicy` (`the 'local' policy ('closed' for api:payments)`),
 * a few named per policy and the rest counted, so the line stays short however many there are.
 */
export function describePolicies(
  defaultPolicy: StoreFailurePolicy,
  resources: Iterable<readonly [name: string, policy: StoreFailurePolicy]>,
): string {
  const others = new Map<StoreFailurePolicy, string[]>();
  for (const [name, policy] of resources) {
    if (policy === defaultPolicy) continue;
    let names = others.get(policy);
    if (names === undefined) others.set(policy, (names = []));
    names.push(name);
  }
  const base = `the '${defaultPolicy}' policy`;
  if (others.size === 0) return base;
  const parts = STORE_FAILURE_POLICIES.filter((p) => others.has(p)).map((p) => {
    const names = others.get(p)!.sort();
    const shown = names.slice(0, NAMED_EXCEPTIONS).join(', ');
    const more = names.length > NAMED_EXCEPTIONS ? ` and ${names.length - NAMED_EXCEPTIONS} more` : '';
    return `'${p}' for ${shown}${more}`;
  });
  return `${base} (${parts.join('; ')})`;
}

/**
 * Where a {@link FailoverMachine} stands: `healthy` (calls go to the store; timeouts in a row
 * are counted), `down` (calls are answered by their policy; a probe is scheduled), `probing`
 * (a probe is in flight; its success is the recovery back to `healthy`). Closing stops the
 * probes and keeps the state.
 */
export type FailoverStateName = 'healthy' | 'down' | 'probing';

/** A switch between the store and the fallback. */
export interface FailoverSwitch {
  readonly healthy: boolean;
  readonly error?: unknown;
}

/** Options of {@link FailoverMachine}. */
export interface FailoverMachineOptions {
  readonly clock: Clock;
  /** Resolves when the store answers again (`ping`); rejects while it is away. */
  readonly probe: () => Promise<void>;
  /** Timed-out calls in a row (calls in flight together count once) that switch. @default 3 */
  readonly consecutiveFailures?: number;
  /** First probe after a switch, in ms; probes back off to `maxProbeIntervalMs`. @default 50 */
  readonly probeIntervalMs?: number;
  /** @default 500 */
  readonly maxProbeIntervalMs?: number;
  /**
   * True when the store reports its own connection (see `LimitStore.watchConnection`): its failed
   * calls then count as timeouts, since a lost connection has been reported already.
   * @default false (a call that could not reach the store switches at once)
   */
  readonly connectionReported?: boolean;
  /**
   * What is away, in the switch log lines: `store redis at 10.0.0.5:6379`, `sluice service at
   * http://sluice:8080`. @default `rate-limit store`
   */
  readonly subject?: string;
  /**
   * The policy answering while it is away, in the switch log lines (read at each switch): `the
   * 'local' policy`. @default `each resource's store-failure policy`
   */
  readonly policy?: () => string;
  /** Fields of the switch log lines (read at each switch). */
  readonly logFields?: () => Record<string, unknown>;
  readonly logger?: Logger | undefined;
  /**
   * While the store stays away, a summary line once per this many ms (how long, the fallback's
   * decisions so far); 0 for none. @default 30000
   */
  readonly summaryIntervalMs?: number;
}

/** An outage as it stands (see {@link FailoverMachine.outage}). */
export interface Outage {
  /** How long the store has been away, in ms. */
  readonly lastedMs: number;
  /** The latest failure: the switch's, then each failed probe's (`ECONNREFUSED 127.0.0.1:6379`). */
  readonly reason: string;
  /** Decisions made by the fallback since the switch. */
  readonly fallbackDecisions: number;
}

/**
 * How a call is answered while the store cannot decide it: by its policy, with two safety
 * rules. A `local` call that failed before the switch is denied (this process's global
 * admissions are its share until then, a local admission on top would exceed it), and so is a
 * `local` call while the number of clients is unknown (no share is known to be safe).
 * `closed` here means "denied for want of the store": its decisions say `store_unavailable`.
 */
export function answeringPolicy(policy: StoreFailurePolicy, healthy: boolean, peersKnown: boolean): StoreFailurePolicy {
  return policy === 'local' && (healthy || !peersKnown) ? 'closed' : policy;
}

/**
 * Whether the store answers, as one state machine: marked down at once when it cannot be
 * reached, or after `consecutiveFailures` timed-out calls in a row (one slow answer under load
 * is not an outage); then probed in the background with backoff until it answers, which is the
 * recovery. Switches are logged and told to every {@link onSwitch} listener. The core
 * {@link Failover} runs on one; the remote client shares one between its checks and its leases,
 * so a process has one health loop per store.
 */
export class FailoverMachine {
  readonly #o: FailoverMachineOptions;
  readonly #clock: Clock;
  readonly #streak: FailureStreak;
  readonly #listeners = new Set<(e: FailoverSwitch) => void>();
  readonly probeIntervalMs: number;
  readonly maxProbeIntervalMs: number;
  #state: FailoverStateName = 'healthy';
  #timer: TimerHandle | undefined;
  #probe: Promise<void> | undefined;
  #closed = false;
  readonly #away: Degradation;
  /** What is away, and what answers meanwhile, as the log lines name them. */
  readonly #subject: string;
  readonly #policy: () => string;
  #fallbackDecisions = 0;
  /** {@link fallbackDecisions} at the switch. */
  #fallbackAtSwitch = 0;

  constructor(options: FailoverMachineOptions) {
    this.#o = options;
    this.#clock = options.clock;
    const subject = options.subject ?? 'rate-limit store';
    const policy = () => options.policy?.() ?? "each resource's store-failure policy";
    this.#subject = subject;
    this.#policy = policy;
    this.#away = new Degradation({
      logger: options.logger,
      clock: options.clock,
      event: 'store_unreachable',
      ...(options.summaryIntervalMs === undefined ? {} : { summaryIntervalMs: options.summaryIntervalMs }),
      summary: (spell) => ({
        msg: `${subject} still unreachable after ${secondsText(spell.lastedMs)} (${spell.reason}): ${this.#spellDecisions()} decisions made by ${policy()} so far`,
        fields: { ...options.logFields?.(), fallbackDecisions: this.#spellDecisions() },
      }),
    });
    this.probeIntervalMs = options.probeIntervalMs ?? 50;
    this.maxProbeIntervalMs = options.maxProbeIntervalMs ?? 500;
    const threshold = options.consecutiveFailures ?? 3;
    if (!Number.isInteger(threshold) || threshold < 1 || threshold > 1000) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'failover.consecutiveFailures', 'must be an integer between 1 and 1000');
    }
    this.#streak = new FailureStreak(threshold);
  }

  get state(): FailoverStateName {
    return this.#state;
  }

  /** False while the store is considered down. */
  get healthy(): boolean {
    return this.#state === 'healthy';
  }

  /** Timed-out calls in a row that switch. */
  get consecutiveFailures(): number {
    return this.#streak.threshold;
  }

  /** Decisions made by the fallback since this machine was made (see {@link fallbackDecided}). */
  get fallbackDecisions(): number {
    return this.#fallbackDecisions;
  }

  /** The store's absence while it lasts: since when, why, and what the fallback decided. */
  get outage(): Outage | undefined {
    const spell = this.#away.spell;
    if (spell === undefined) return undefined;
    return { lastedMs: spell.lastedMs, reason: spell.reason, fallbackDecisions: this.#spellDecisions() };
  }

  /** A decision was made by the fallback (counted for the log lines and {@link fallbackDecisions}). */
  fallbackDecided(): void {
    this.#fallbackDecisions++;
  }

  #spellDecisions(): number {
    return this.#fallbackDecisions - this.#fallbackAtSwitch;
  }

  /** How long a caller denied for want of the store should wait: a probe's interval. */
  get retryAfterMs(): number {
    return this.healthy ? this.probeIntervalMs : this.maxProbeIntervalMs;
  }

  /** Listens to switches; returns the way to stop. */
  onSwitch(listener: (e: FailoverSwitch) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Call before a call to the store; pass the ticket to {@link failed}. */
  begin(): number {
    return this.#streak.begin();
  }

  /** A call was answered: a streak of timeouts is over. */
  succeeded(): void {
    this.#streak.succeeded();
  }

  /**
   * A call failed for want of the store (`STORE_TIMEOUT`, or the store unreachable): a timeout
   * counts towards the streak; anything else switches at once, unless the store reports its
   * connection itself.
   */
  failed(err: unknown, ticket: number): void {
    const timeout = err instanceof SluiceError && err.code === ErrorCodes.STORE_TIMEOUT;
    const lost = !timeout && this.#o.connectionReported !== true;
    if (lost || this.#streak.failed(ticket)) this.markDown(err);
  }

  /** Switches to the fallback (if not already) and starts probing. */
  markDown(error: unknown): void {
    if (this.#state !== 'healthy' || this.#closed) return;
    this.#state = 'down';
    this.#streak.reset();
    this.#fallbackAtSwitch = this.#fallbackDecisions;
    // One line for the whole outage: what happened and what answers meanwhile.
    this.#away.fail(error, (reason) => ({
      msg: `${this.#subject} unreachable (${reason}): deciding by ${this.#policy()} until it answers`,
      fields: { ...this.#o.logFields?.() },
    }));
    this.#emit({ healthy: false, error });
    this.#schedule(this.probeIntervalMs);
  }

  /** The store says it is connected again: probe now rather than at the next backoff step. */
  probeNow(): void {
    if (this.#state !== 'down' || this.#closed) return;
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#timer = undefined;
    this.#startProbe(this.probeIntervalMs);
  }

  /** Stops probing; waits for a probe in flight. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#timer = undefined;
    this.#away.close();
    this.#listeners.clear();
    await this.#probe;
  }

  #schedule(delay: number): void {
    if (this.#closed) return;
    this.#timer = this.#clock.setTimer(
      () => {
        this.#timer = undefined;
        this.#startProbe(delay);
      },
      delay,
      true,
    );
  }

  #startProbe(delay: number): void {
    this.#state = 'probing';
    this.#probe = this.#run(delay).finally(() => (this.#probe = undefined));
  }

  async #run(delay: number): Promise<void> {
    try {
      await this.#o.probe();
    } catch (err) {
      // Counted (and its reason kept for the summary), not logged: the switch's line said it.
      this.#away.repeat(err);
      this.#state = 'down';
      this.#schedule(Math.min(this.maxProbeIntervalMs, delay * 2));
      return;
    }
    if (this.#closed) {
      this.#state = 'down';
      return;
    }
    this.#state = 'healthy';
    this.#streak.reset();
    this.#away.recover((spell) => {
      const n = this.#spellDecisions();
      return {
        msg: `${this.#subject} answers again after ${secondsText(spell.lastedMs)}: global decisions resumed (${n} decisions made by the fallback meanwhile)`,
        fields: { ...this.#o.logFields?.(), fallbackDecisions: n },
      };
    });
    this.#emit({ healthy: true });
  }

  #emit(e: FailoverSwitch): void {
    for (const listener of [...this.#listeners]) listener(e);
  }
}

/** Permits taken from the fallback have ids with this prefix, so they are freed there. */
export const LOCAL_PERMIT_PREFIX = 'local:';

/** True for the id of a permit taken from the fallback. */
export function isLocalPermit(permitId: string): boolean {
  return permitId.startsWith(LOCAL_PERMIT_PREFIX);
}

/** The id a permit taken from the fallback is known by ('' stays ''). */
export function localPermitId(permitId: string): string {
  return permitId === '' || isLocalPermit(permitId) ? permitId : `${LOCAL_PERMIT_PREFIX}${permitId}`;
}

/**
 * A decision made while the store could not decide, shaped as callers see it: source
 * `fallback`, a permit id with the fallback's prefix, and reason `store_unavailable` when it was
 * denied for want of the store (`unavailable`) rather than by a local share.
 */
export function fallbackDecision(decision: Decision, unavailable: boolean): Decision {
  const permitId = decision.permitId === undefined ? undefined : localPermitId(decision.permitId);
  const permit = permitId === undefined ? {} : { permitId };
  const reason = !decision.allowed && unavailable ? { reason: 'store_unavailable' as const } : {};
  return { ...decision, ...permit, ...reason, source: 'fallback' };
}

/** The statuses of an `open` (admitted) or `closed` (denied, retry after `retryMs`) answer. */
export function policyStatuses(limits: readonly CompiledLimit[], allowed: boolean, retryMs: number): LimitStatus[] {
  return limits.map((l) => ({
    id: l.id,
    algorithm: l.algorithm,
    allowed,
    limit: l.limit,
    remaining: allowed ? l.limit : 0,
    retryAfterMs: allowed ? 0 : retryMs,
    resetAfterMs: allowed ? 0 : retryMs,
  }));
}

/** A limit's fair share among `peers` clients: at least 1 permit. */
export function fairShare(limit: number, peers: number): number {
  return peers <= 1 ? limit : Math.max(1, Math.floor(limit / peers));
}

/** A policy or compiled limit with its `limit` and `burst` (when set) cut to their fair shares. */
export function fairShareOf<T extends { readonly limit: number; readonly burst?: number }>(l: T, peers: number): T {
  if (peers <= 1) return l;
  return { ...l, limit: fairShare(l.limit, peers), ...(l.burst === undefined ? {} : { burst: fairShare(l.burst, peers) }) };
}
