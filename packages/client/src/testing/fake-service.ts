import { ErrorCodes, Limiter, SluiceError, isSluiceError, type Clock, type ResourceConfig } from '@sluice/core';
import {
  encodeDecision,
  encodeError,
  encodeReserve,
  encodeResource,
  type AcquireItem,
  type AdjustItem,
  type Batch,
  type BookItem,
  type CancelItem,
  type CheckItem,
  type OutcomeItem,
  type ReleaseItem,
  type RenewItem,
  type ReserveItem,
  type ResourceBody,
  type ResourcesBody,
} from '@sluice/core/wire';
import type { Answer, CallOptions, Transport } from '../transport.js';

/** What the fake saw: one entry per call. */
export interface Seen {
  /** The endpoint with its query, e.g. `/v1/check?statuses=1`. */
  readonly path: string;
  /** The request body the client sent. */
  readonly body: unknown;
}

function errorAnswer(err: unknown): Answer {
  if (!isSluiceError(err)) throw err;
  const status = err.code === ErrorCodes.UNKNOWN_RESOURCE ? 404 : 400;
  return { status, body: encodeError(err.code, err.message, err.field) };
}

/** Whether a decision path asks for per-limit statuses (`?statuses=1`), as the service reads it. */
function wantsStatuses(path: string): boolean {
  const value = new URLSearchParams(path.split('?')[1] ?? '').get('statuses');
  return value === '1' || value === 'true';
}

/**
 * An in-process stand-in for `sluice serve` behind the {@link Transport} interface: a core
 * limiter answers the same endpoints with the same shapes, written by the service's own encoders
 * (`@sluice/core/wire`). `down` makes every call fail as an
 * unreachable service would, `slow` as one that does not answer in time. `clients` is the count
 * of clients the service reports (as the real one counts client ids).
 */
export class FakeService implements Transport {
  /** The core limiter that decides; readable for assertions. */
  readonly limiter: Limiter;
  /** Every call, in order. */
  readonly seen: Seen[] = [];
  /** Every call fails as if the service were unreachable (`SLUICE_ERR_STORE_UNAVAILABLE`). */
  down = false;
  /** Every call fails as if the service did not answer in time (`SLUICE_ERR_STORE_TIMEOUT`). */
  slow = false;
  /** The rule version every answer carries; {@link setRules} increments it. */
  version = 1;
  /** The count of clients the service reports in `/v1/resources`. */
  clients = 1;
  /** True once the client closed its transport. */
  closed = false;
  /** Every outcome reported (`/v1/outcomes` items), in order. */
  readonly outcomes: OutcomeItem[] = [];
  /** Acquire calls that wait here until released by the test or aborted. */
  holdAcquire = false;

  /** A fake deciding `resources` on `clock` (a `ManualClock` in tests). */
  constructor(resources: Record<string, ResourceConfig>, clock: Clock) {
    this.limiter = new Limiter({ resources, clock });
  }

  /** A new rule version. */
  setRules(resources: Record<string, ResourceConfig>): void {
    this.limiter.setResources(resources);
    this.version++;
  }

  /** How many calls went to `path` (query left out), e.g. `count('/v1/check')`. */
  count(path: string): number {
    return this.seen.filter((s) => s.path.split('?')[0] === path).length;
  }

  /** Answers one call of the client, as `sluice serve` would. */
  async call(path: string, options: CallOptions): Promise<Answer> {
    this.seen.push({ path, body: options.body });
    if (this.down) throw new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'connection refused');
    if (this.slow) throw new SluiceError(ErrorCodes.STORE_TIMEOUT, 'the service did not answer in time');
    const answer = await this.#answer(path.split('?')[0]!, options, wantsStatuses(path));
    return { ...answer, rulesVersion: this.version };
  }

  /** The client closes its transport; the fake's limiter stays readable for assertions. */
  async close(): Promise<void> {
    this.closed = true;
  }

  async #answer(path: string, options: CallOptions, statuses: boolean): Promise<Answer> {
    const b = options.body;
    const encode = (d: Parameters<typeof encodeDecision>[0]) => encodeDecision(d, statuses);
    const one = async <T>(fn: () => Promise<T>, enc: (r: T) => object): Promise<object> => {
      try {
        return enc(await fn());
      } catch (err) {
        return errorAnswer(err).body as object;
      }
    };
    switch (path) {
      case '/readyz':
        return { status: 200, body: { status: 'ready' } };
      case '/v1/resources': {
        const resources: Record<string, ResourceBody> = {};
        for (const name of this.limiter.resources()) resources[name] = encodeResource(this.limiter.settingsOf(name));
        const body: ResourcesBody = { version: this.version, clients: this.clients, truncated: false, resources };
        return { status: 200, body };
      }
      case '/v1/check': {
        const { items } = b as Batch<CheckItem>;
        const results = await Promise.all(items.map((i) => one(() => this.limiter.try(i.resource, i), encode)));
        return { status: 200, body: { results } };
      }
      case '/v1/book':
      case '/v1/claim': {
        const { items } = b as Batch<BookItem>;
        const op = path === '/v1/book' ? 'book' : 'claim';
        const results = await Promise.all(items.map((i) => one(() => this.limiter[op](i.resource, i), encode)));
        return { status: 200, body: { results } };
      }
      case '/v1/cancel': {
        const i = b as CancelItem;
        try {
          return { status: 200, body: { cancelled: await this.limiter.cancel(i.resource, i) } };
        } catch (err) {
          return errorAnswer(err);
        }
      }
      case '/v1/acquire': {
        const i = b as AcquireItem;
        if (this.holdAcquire) {
          await new Promise((_, reject) =>
            options.signal?.addEventListener('abort', () => reject(new SluiceError(ErrorCodes.ABORTED, 'aborted'))),
          );
        }
        try {
          return { status: 200, body: encode(await this.limiter.acquire(i.resource, i)) };
        } catch (err) {
          return errorAnswer(err);
        }
      }
      case '/v1/reserve': {
        const i = b as ReserveItem;
        try {
          return { status: 200, body: encodeReserve(await this.limiter.reserve(i.resource, i)) };
        } catch (err) {
          return errorAnswer(err);
        }
      }
      case '/v1/adjust':
      case '/v1/release':
      case '/v1/renew': {
        try {
          if (path === '/v1/adjust') {
            const i = b as AdjustItem;
            await this.limiter.adjust(i.resource, i);
            return { status: 200, body: { adjusted: true } };
          }
          if (path === '/v1/release') {
            const i = b as ReleaseItem;
            return { status: 200, body: { released: await this.limiter.release(i.resource, i) } };
          }
          const i = b as RenewItem;
          return { status: 200, body: { renewed: await this.limiter.renew(i.resource, i) } };
        } catch (err) {
          return errorAnswer(err);
        }
      }
      case '/v1/outcomes': {
        const { items } = b as Batch<OutcomeItem>;
        this.outcomes.push(...items);
        const results = await Promise.all(
          items.map((i) =>
            one(
              async () => this.limiter.reportOutcome(i),
              () => ({ recorded: true }),
            ),
          ),
        );
        return { status: 200, body: { results } };
      }
      default:
        return { status: 404, body: { error: { code: 'SLUICE_ERR_NOT_FOUND', message: path } } };
    }
  }
}
