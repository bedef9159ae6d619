/**
 * A limiter's resources: compiled once when set, replaced as a whole by a rule update, and the
 * validation that turns a caller's options into a {@link Call} on one of them.
 */
import type { OutcomeRecorders } from '../breakers/outcome-recorders.js';
import { describePolicies, type StoreFailurePolicy } from '../failover/failover-state.js';
import type { HotKeyTrackers } from '../local/hot-keys.js';
import type { Prefilter } from '../local/prefilter.js';
import type { Clock } from '../shared/clock.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import { checkCostAtMost } from '../shared/policy.js';
import { CallKeys } from './call-keys.js';
import { checkTenant, type Call } from './limiter-calls.js';
import type { TryOptions } from './rate-limiter.js';
import { compileResource, type CompiledResource, type ResourceConfig } from './resource.js';
import { tierOf } from './tiers.js';

/** What a {@link ResourceTable} keeps in step with its resources. */
export interface ResourceTableParts {
  readonly clock: Clock;
  readonly onStoreFailure: StoreFailurePolicy;
  readonly maxKeyLength: number;
  readonly hot: HotKeyTrackers;
  readonly prefilter: Prefilter;
}

/** The compiled resources of one limiter, by name. */
export class ResourceTable {
  readonly #resources = new Map<string, CompiledResource>();
  readonly #parts: ResourceTableParts;
  /** Caller keys seen lately, validated and encoded once. */
  readonly #keys: CallKeys;
  /** Outcome recorders of the resources' fleet breakers (set once the store is known). */
  #outcomes: OutcomeRecorders | undefined;

  constructor(parts: ResourceTableParts) {
    this.#parts = parts;
    this.#keys = new CallKeys(parts.maxKeyLength);
  }

  /** Starts keeping the outcome recorders in step (checking every resource already set). */
  useOutcomes(outcomes: OutcomeRecorders): void {
    for (const r of this.#resources.values()) outcomes.check(r);
    this.#outcomes = outcomes;
  }

  /** Sets or replaces one resource (see `Limiter.setLimits`). */
  set(resource: string, config: ResourceConfig): void {
    const compiled = compileResource(resource, config, this.#parts.clock, this.#parts.onStoreFailure);
    this.#outcomes?.check(compiled);
    this.#resources.set(resource, this.#keepBreaker(compiled));
    this.#parts.hot.sync(compiled.name, compiled.hotKeys);
    this.#parts.prefilter.clear();
  }

  /** Replaces every resource, validating all before changing any (see `Limiter.setResources`). */
  setAll(resources: Record<string, ResourceConfig>): void {
    const compiled = Object.entries(resources).map(([name, config]) =>
      compileResource(name, config, this.#parts.clock, this.#parts.onStoreFailure),
    );
    for (const r of compiled) this.#outcomes?.check(r);
    const next = new Map<string, CompiledResource>();
    for (const r of compiled) next.set(r.name, this.#keepBreaker(r));
    for (const name of this.#resources.keys()) if (!next.has(name)) this.#outcomes?.remove(name);
    this.#resources.clear();
    for (const [name, r] of next) this.#resources.set(name, r);
    this.#parts.hot.keepOnly(next);
    for (const r of next.values()) this.#parts.hot.sync(r.name, r.hotKeys);
    this.#parts.prefilter.clear();
  }

  /** Keeps a running breaker's history when only the limits change. */
  #keepBreaker(compiled: CompiledResource): CompiledResource {
    const breaker = this.#resources.get(compiled.name)?.breaker;
    return breaker && compiled.breaker ? { ...compiled, breaker } : compiled;
  }

  /** Removes a resource; false when it had none. */
  remove(resource: string): boolean {
    this.#outcomes?.remove(resource);
    this.#parts.hot.drop(resource);
    return this.#resources.delete(resource);
  }

  has(resource: string): boolean {
    return this.#resources.has(resource);
  }

  names(): string[] {
    return [...this.#resources.keys()];
  }

  /** The store-failure policy of resources that name none. */
  get defaultPolicy(): StoreFailurePolicy {
    return this.#parts.onStoreFailure;
  }

  /** The store-failure policies in force, for the failover's log lines (see {@link describePolicies}). */
  /** Whether any resource answers by `local` while the store is away (with none yet: the default). */
  usesLocal(): boolean {
    if (this.#resources.size === 0) return this.#parts.onStoreFailure === 'local';
    for (const r of this.#resources.values()) if (r.onStoreFailure === 'local') return true;
    return false;
  }

  policies(): string {
    const each = [...this.#resources.values()].map((r) => [r.name, r.onStoreFailure] as const);
    return describePolicies(this.#parts.onStoreFailure, each);
  }

  /** The resources by name, read-only (the hot path of `trySync` looks them up itself). */
  get byName(): ReadonlyMap<string, CompiledResource> {
    return this.#resources;
  }

  /** The resource; throws `SLUICE_ERR_UNKNOWN_RESOURCE` when it is not set. */
  get(resource: string): CompiledResource {
    const r = this.#resources.get(resource);
    if (r === undefined) {
      throw new SluiceError(ErrorCodes.UNKNOWN_RESOURCE, `no limits configured for resource ${JSON.stringify(resource)}`, {
        field: 'resource',
      });
    }
    return r;
  }

  /** A caller's options on a resource, validated. */
  call(resource: string, options: TryOptions): Call {
    const r = this.get(resource);
    const { sub, key, parts } = this.#keys.of(resource, options.key);
    // The usual call (cost 1 on a resource that admits it) needs no check.
    const cost = options.cost === undefined && r.paths.maxCost >= 1 ? 1 : checkCostAtMost(options.cost ?? 1, r.paths.maxCost);
    const tenant = options.tenant === undefined ? undefined : checkTenant(options.tenant);
    const tier = tierOf(r.priority, options.priority, resource);
    return {
      resource: r,
      sub,
      key,
      parts,
      limits: r.limits,
      cost,
      tenant,
      priority: tier.name,
      tier,
    };
  }
}
