import { createHash } from 'node:crypto';
import { ManualClock, RESOURCE_PATTERN, compileResource, type Limiter, type Logger, type ResourceConfig } from '@sluice/core';
import { canonicalJson, type EnvoyDomain, type RuleVersion } from '@sluice/rules';

/** What {@link LiveRules} reports when a version becomes active. */
export interface RulesAppliedEvent {
  readonly version: number;
  readonly added: readonly string[];
  readonly changed: readonly string[];
  readonly removed: readonly string[];
}

/** Resources {@link LiveRules.update} checks between two yields to the event loop (~10 ms of work). */
export const UPDATE_SLICE = 500;

const yieldToLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A version's limiter resources, and what checking them found so far. */
interface Checked {
  readonly configs: ReadonlyMap<string, ResourceConfig>;
  /** Resource name -> canonical JSON of its config. */
  readonly json: Map<string, string>;
  readonly clock: ManualClock;
}

/** Options of {@link LiveRules}. */
export interface LiveRulesOptions {
  readonly limiter: Limiter;
  readonly logger?: Logger;
  /** Called after each version is made active. */
  readonly onApplied?: (event: RulesAppliedEvent) => void;
}

/**
 * The limiter's name for a rule resource. Envoy limits whose path is not a valid resource name
 * are named by a digest the limiter does not accept; they get one it does. `envoy@` never
 * starts a readable Envoy resource (`envoy:`), so the names stay apart.
 */
export function limiterResourceName(name: string): string {
  if (RESOURCE_PATTERN.test(name)) return name;
  return `envoy@${createHash('sha256').update(name).digest('hex').slice(0, 40)}`;
}

/**
 * The rules the server decides by right now: the active version's resources (native ones and
 * one per Envoy `rate_limit`) are pushed into the limiter; resources that a later version no
 * longer has are refused from then on (`SLUICE_ERR_UNKNOWN_RESOURCE`). Versions only move
 * forward: an older one delivered late is ignored.
 */
export class LiveRules {
  readonly #limiter: Limiter;
  readonly #logger: Logger | undefined;
  readonly #onApplied: LiveRulesOptions['onApplied'];
  /** Active resource name -> canonical JSON of its config (to tell changes apart). */
  #resources = new Map<string, string>();
  #domains: Readonly<Record<string, EnvoyDomain>> = {};
  #version: RuleVersion | undefined;
  #updates: Promise<void> = Promise.resolve();

  constructor(options: LiveRulesOptions) {
    this.#limiter = options.limiter;
    this.#logger = options.logger;
    this.#onApplied = options.onApplied;
  }

  /** The active version, once one is. */
  get version(): RuleVersion | undefined {
    return this.#version;
  }

  /** Envoy domains of the active version. */
  get domains(): Readonly<Record<string, EnvoyDomain>> {
    return this.#domains;
  }

  /** Names of the active resources (native and Envoy). */
  resourceNames(): string[] {
    return [...this.#resources.keys()];
  }

  /**
   * True when `resource` is in the active version. Envoy limit overrides never are: they are
   * the gRPC service's own (see `OverrideTable`), not resources of the rules.
   */
  has(name: string): boolean {
    return this.#resources.has(limiterResourceName(name));
  }

  /**
   * Makes `v` active unless a newer (or the same) version already is, at once: every resource
   * is checked and the version swapped in before this returns (start-up, tests). A running
   * service uses {@link update}.
   */
  apply(v: RuleVersion): boolean {
    if (!this.#newer(v)) return false;
    const checked = this.#configsOf(v);
    for (const name of checked.configs.keys()) if (!this.#check(v, name, checked)) return false;
    return this.#swap(v, checked);
  }

  /**
   * {@link apply} for a running service: the version's resources are checked in slices of
   * {@link UPDATE_SLICE} that yield to the event loop between them, so a version of thousands
   * of resources does not hold decisions up; then the version is swapped in at once (all its
   * limits set in one go, so no decision sees half of it). Updates run one at a time, in call
   * order; a version that is no longer newer when its turn comes is skipped. Never rejects.
   */
  update(v: RuleVersion): Promise<boolean> {
    const run = this.#updates.then(() => this.#update(v));
    this.#updates = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  /** Resolves once every update asked for so far has finished. */
  settled(): Promise<void> {
    return this.#updates;
  }

  async #update(v: RuleVersion): Promise<boolean> {
    try {
      if (!this.#newer(v)) return false;
      const checked = this.#configsOf(v);
      let n = 0;
      for (const name of checked.configs.keys()) {
        if (!this.#check(v, name, checked)) return false;
        if (++n % UPDATE_SLICE === 0) await yieldToLoop();
      }
      // Another version may have been applied meanwhile (apply() is synchronous).
      return this.#newer(v) && this.#swap(v, checked);
    } catch (err) {
      this.#logger?.warn({ err, version: v.version }, 'rule version not applied; keeping the active one');
      return false;
    }
  }

  #newer(v: RuleVersion): boolean {
    return this.#version === undefined || v.version > this.#version.version;
  }

  /** The limiter's resources of `v`: native ones and one per Envoy `rate_limit`. */
  #configsOf(v: RuleVersion): Checked {
    const configs = new Map<string, ResourceConfig>();
    for (const [name, rule] of Object.entries(v.ruleSet.resources)) configs.set(name, rule);
    for (const domain of Object.values(v.ruleSet.domains)) {
      for (const [ruleName, rule] of Object.entries(domain.resources())) {
        const name = limiterResourceName(ruleName);
        if (configs.has(name)) {
          this.#logger?.warn(
            { resource: name, domain: domain.domain },
            'an envoy limit has the name of a resource; the envoy limit wins',
          );
        }
        configs.set(name, rule);
      }
    }
    return { configs, json: new Map(), clock: new ManualClock() };
  }

  /**
   * Whether the limiter accepts resource `name` (all or nothing: a version with a resource the
   * limiter refuses is not made active). A resource unchanged from the active version was
   * accepted before and is not compiled again.
   */
  #check(v: RuleVersion, name: string, checked: Checked): boolean {
    const config = checked.configs.get(name)!;
    const json = canonicalJson(config);
    checked.json.set(name, json);
    if (this.#resources.get(name) === json) return true;
    try {
      compileResource(name, config, checked.clock);
      return true;
    } catch (err) {
      this.#logger?.warn(
        { err, version: v.version, resource: name },
        'rule version refused by the limiter; keeping the active one',
      );
      return false;
    }
  }

  #swap(v: RuleVersion, checked: Checked): boolean {
    const next = new Map<string, string>();
    const added: string[] = [];
    const changed: string[] = [];
    for (const [name, config] of checked.configs) {
      const json = checked.json.get(name)!;
      const before = this.#resources.get(name);
      // setLimits carries usage over but clears local tiers: only call it for real changes.
      if (before !== json) {
        this.#limiter.setLimits(name, config);
        (before === undefined ? added : changed).push(name);
      }
      next.set(name, json);
    }
    const removed = [...this.#resources.keys()].filter((n) => !next.has(n));
    this.#resources = next;
    this.#domains = v.ruleSet.domains;
    this.#version = v;
    const event = { version: v.version, added, changed, removed };
    this.#logger?.info(
      { version: v.version, author: v.author, reason: v.reason, hash: v.hash, added, changed, removed },
      'rule version active',
    );
    this.#onApplied?.(event);
    return true;
  }
}
