/**
 * A scripted RateLimiter for unit tests: answers from a queue of decisions (or errors) and
 * records every call. Not exported from the package.
 */
import type { AcquireOptions, Decision, PermitOptions, RateLimiter, TryOptions } from '@sluice/core';

export type Answer = Decision | Error | ((options: AcquireOptions) => Promise<Decision>);

export function allow(extra: Partial<Decision> = {}): Decision {
  return {
    allowed: true,
    limit: 10,
    remaining: 9,
    retryAfterMs: 0,
    resetAfterMs: 0,
    reason: 'allowed',
    limitId: '0',
    statuses: [],
    ...extra,
  };
}

export function deny(retryAfterMs: number, extra: Partial<Decision> = {}): Decision {
  return {
    allowed: false,
    limit: 10,
    remaining: 0,
    retryAfterMs,
    resetAfterMs: retryAfterMs,
    reason: 'rate_limited',
    limitId: '0',
    statuses: [],
    ...extra,
  };
}

export class ScriptedLimiter implements RateLimiter {
  readonly calls: { method: string; resource: string; options: unknown }[] = [];
  readonly answers: Answer[] = [];
  readonly known: Set<string>;

  constructor(resources: string[] = ['api:a', 'api:b']) {
    this.known = new Set(resources);
  }

  protected next(options: AcquireOptions): Promise<Decision> {
    const a = this.answers.shift() ?? allow();
    if (a instanceof Error) return Promise.reject(a);
    if (typeof a === 'function') return a(options);
    return Promise.resolve(a);
  }

  async try(resource: string, options: TryOptions = {}): Promise<Decision> {
    this.calls.push({ method: 'try', resource, options });
    return this.next(options);
  }
  trySync(): Decision | undefined {
    return undefined;
  }
  async acquire(resource: string, options: AcquireOptions = {}): Promise<Decision> {
    this.calls.push({ method: 'acquire', resource, options });
    return this.next(options);
  }
  async release(resource: string, options: PermitOptions): Promise<boolean> {
    this.calls.push({ method: 'release', resource, options });
    return true;
  }
  async renew(resource: string, options: PermitOptions): Promise<boolean> {
    this.calls.push({ method: 'renew', resource, options });
    return true;
  }
  async adjust(resource: string, options: { key?: string; delta: number }): Promise<void> {
    this.calls.push({ method: 'adjust', resource, options });
  }
  has(resource: string): boolean {
    return this.known.has(resource);
  }
  async close(): Promise<void> {}

  methods(): string[] {
    return this.calls.map((c) => `${c.method}:${c.resource}`);
  }
}

/** A scripted limiter that can book: `book` answers from the same queue, `cancel` is recorded. */
export class BookingLimiter extends ScriptedLimiter {
  async book(resource: string, options: TryOptions & { id: string }): Promise<Decision> {
    this.calls.push({ method: 'book', resource, options });
    return this.next(options);
  }
  async claim(resource: string, options: TryOptions & { id: string }): Promise<Decision> {
    this.calls.push({ method: 'claim', resource, options });
    return this.next(options);
  }
  async cancel(resource: string, options: { key?: string; id: string }): Promise<boolean> {
    this.calls.push({ method: 'cancel', resource, options });
    return true;
  }
}

/** A denial that booked a slot `startsInMs` away. */
export function booked(startsInMs: number, id = 'b'): Decision {
  return deny(startsInMs, { booking: { outcome: 'booked', id, startsInMs, expiresInMs: startsInMs + 400 } });
}
