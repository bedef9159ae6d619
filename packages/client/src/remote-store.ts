import {
  ErrorCodes,
  Limiter,
  SluiceError,
  type AdaptiveTimeout,
  type FailoverMachine,
  type LimitStatus,
  type LimitStore,
  type PeerCount,
  type ReserveResult,
  type StorageKeyParts,
} from '@sluice/core';
import type { CompiledRemoteOptions } from './options.js';
import { decodeDecision, decodeError, decodeReserve } from '@sluice/core/wire';
import { isUnavailable, type Transport } from './transport.js';

/**
 * The resource and caller key of a store request, as the service's API names them (the service
 * encodes them again). The core limiter carries them with every request (`parts`), so nothing
 * reads the storage key back. Leases are taken for a caller key only: tenant quotas and split
 * shares are the service's own to keep.
 */
function split(request: { readonly parts?: StorageKeyParts }): { resource: string; key?: string } {
  const parts = request.parts;
  if (parts === undefined) {
    throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'a request to the service must name its resource and key (parts)');
  }
  if (parts.tenant !== undefined || parts.part !== undefined || parts.pool !== undefined) {
    throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'tenant quotas and split resources are not leased by the client');
  }
  return parts.key === '' ? { resource: parts.resource } : { resource: parts.resource, key: parts.key };
}

/**
 * Timeouts of the calls a lease makes. Their failures are counted by the core failover of the
 * lease limiter, on the remote limiter's shared health.
 */
export interface RemoteStoreOptions {
  /** The timeout of the next call (adaptive or fixed). */
  readonly timeout: AdaptiveTimeout;
  readonly readyTimeoutMs: number;
  /** A call was answered (any status: the service is there). */
  readonly onAnswer: () => void;
}

/**
 * The service as a {@link LimitStore} for leases: `reserve` takes a batch of permits
 * (`POST /v1/reserve`), `adjust` returns leftovers (`POST /v1/adjust`), `ping` asks `/readyz`.
 * The core limiter's lease cache and failover run on top of it unchanged, so leases over the
 * service follow exactly the in-process rules (batch sizing, TTL, return on expiry and close,
 * fair-share fallback). Concurrency limits are never leased, so renew/release are not served.
 */
export class RemoteStore implements LimitStore {
  readonly name = 'sluice-service';

  constructor(
    private readonly transport: Transport,
    private readonly o: RemoteStoreOptions,
  ) {}

  async consume(
    request: Parameters<LimitStore['consume']>[0],
  ): Promise<{ allowed: boolean; statuses: LimitStatus[]; now: number }> {
    const d = decodeDecision(await this.#post('/v1/check?statuses=1', { ...split(request), cost: request.cost }));
    return { allowed: d.allowed, statuses: [...d.statuses], now: Date.now() };
  }

  async reserve(request: Parameters<LimitStore['reserve']>[0]): Promise<ReserveResult> {
    const body = await this.#post('/v1/reserve', {
      ...split(request),
      min: request.min,
      max: request.max,
      holdMs: request.holdMs,
    });
    // `at`: the service's stamp of the charge (its store's clock, not this process's); 0 if it has none.
    const { granted, at, decision } = decodeReserve(body);
    return { allowed: granted > 0, statuses: decision.statuses, now: Date.now(), granted, at };
  }

  async adjust(request: Parameters<LimitStore['adjust']>[0]): Promise<void> {
    await this.#post('/v1/adjust', { ...split(request), delta: request.delta, ...(request.at ? { at: request.at } : {}) });
  }

  renew(): Promise<boolean> {
    return Promise.resolve(false);
  }

  release(): Promise<boolean> {
    return Promise.resolve(false);
  }

  async ping(): Promise<void> {
    const a = await this.transport.call('/readyz', { timeoutMs: this.o.readyTimeoutMs });
    if (a.status !== 200) throw new SluiceError(ErrorCodes.STORE_UNAVAILABLE, `the service is not ready (${a.status})`);
  }

  async close(): Promise<void> {
    // The transport belongs to the remote limiter.
  }

  async #post(path: string, body: object): Promise<unknown> {
    const sentAt = performance.now();
    const budget = this.o.timeout.currentMs;
    try {
      const a = await this.transport.call(path, { body, timeoutMs: budget });
      this.o.timeout.observe(performance.now() - sentAt);
      this.o.onAnswer();
      if (a.status !== 200) throw decodeError(a.body, a.status);
      return a.body;
    } catch (err) {
      if (isUnavailable(err)) {
        if (err instanceof SluiceError && err.code === ErrorCodes.STORE_TIMEOUT) this.o.timeout.timedOut(budget);
        // The core failover recognises only these two codes as "store away".
        if (err instanceof SluiceError && err.code !== ErrorCodes.STORE_TIMEOUT) {
          throw new SluiceError(ErrorCodes.STORE_UNAVAILABLE, err.message, { cause: err });
        }
      }
      throw err;
    }
  }
}

/**
 * The core limiter over the service as its store, for leased resources: its lease cache,
 * failover (fair shares, probing) and wait queues apply unchanged. Store switches are reported
 * once, by the remote limiter's own health, so only decisions, refills and waits are observed.
 */
export function leaseLimiter(
  store: RemoteStore,
  o: CompiledRemoteOptions,
  peers: () => PeerCount,
  health: FailoverMachine,
): Limiter {
  const observer = o.observer;
  return new Limiter({
    resources: {},
    store,
    clock: o.clock,
    maxKeyLength: o.maxKeyLength,
    maxWaitMs: o.maxWaitMs,
    ...(observer === undefined
      ? {}
      : {
          observer: {
            decided: (e) => observer.decided?.(e),
            leaseRefilled: (e) => observer.leaseRefilled?.(e),
            waited: (e) => observer.waited?.(e),
          },
        }),
    failover: {
      peers: {
        get count() {
          return peers().count;
        },
        get known() {
          return peers().known !== false;
        },
      },
      // One health loop for the service: the remote limiter's (it logs and reports switches).
      health,
    },
  });
}
