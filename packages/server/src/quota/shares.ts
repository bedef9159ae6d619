/**
 * How a resource's rate is shared among the Envoys subscribed to one of its keys, and the local
 * strategy an Envoy is handed for its share. Pure functions: no clock, no store.
 */
import type { CompiledLimit } from '@sluice/core';

/** How shares follow demand. */
export interface ShareSettings {
  /** Each subscriber wants at least `rate / (subscribers * floorDivisor)`, so a new one is served at once. */
  readonly floorDivisor: number;
  /** Each subscriber wants this times its reported demand, so growth shows in its next report. */
  readonly headroom: number;
}

/** The defaults: a floor of a quarter of an equal split, 25% headroom. */
export const DEFAULT_SHARE_SETTINGS: ShareSettings = Object.freeze({ floorDivisor: 4, headroom: 1.25 });

/**
 * The rate (permits per second) the tightest of a resource's limits admits over its window; a
 * concurrency limit counts no window and is left out (such resources back no assignments).
 */
export function ratePerSecond(limits: readonly CompiledLimit[]): number {
  let rate = Infinity;
  for (const l of limits) {
    if (l.algorithm === 'concurrency' || !(l.windowMs > 0)) continue;
    rate = Math.min(rate, (l.limit * 1000) / l.windowMs);
  }
  return Number.isFinite(rate) ? rate : 0;
}

/**
 * Max-min fair shares of `capacity` among `wants`: no one gets more than it wants, and what one
 * does not want is split among the others evenly, so a subscriber gets less than another only
 * when it wants less. The shares sum to at most `capacity`.
 */
export function fairShares(capacity: number, wants: readonly number[]): number[] {
  const shares = new Array<number>(wants.length).fill(0);
  const order = wants.map((_, i) => i).sort((a, b) => wants[a]! - wants[b]!);
  let left = Math.max(0, capacity);
  for (let n = 0; n < order.length; n++) {
    const i = order[n]!;
    const even = left / (order.length - n);
    const share = Math.min(Math.max(0, wants[i]!), even);
    shares[i] = share;
    left -= share;
  }
  return shares;
}

/** What each subscriber wants: its reported demand with headroom, at least the floor. */
export function wantsOf(rate: number, demands: readonly number[], settings: ShareSettings): number[] {
  const floor = demands.length === 0 ? 0 : rate / (demands.length * settings.floorDivisor);
  return demands.map((d) => Math.max(floor, d * settings.headroom));
}

/** An Envoy token bucket: `maxTokens` to start with and at most, `tokensPerFill` added each `fillIntervalMs`. */
export interface TokenBucketStrategy {
  readonly kind: 'token-bucket';
  readonly maxTokens: number;
  readonly tokensPerFill: number;
  readonly fillIntervalMs: number;
}

/** Deny every request. */
export interface DenyAllStrategy {
  readonly kind: 'deny-all';
}

/** What an Envoy is told to enforce. */
export type Strategy = TokenBucketStrategy | DenyAllStrategy;

/** The most refills an assignment's bucket gets a second (each of at least one token). */
export const FILLS_PER_SECOND = 10;

/** An assignment's bucket holds at least this many seconds of its rate. */
export const BURST_SECONDS = 0.25;

/**
 * An assignment's bucket holds at least this many tokens, or this many seconds of its rate when
 * that is less (a share under 1 a second is not made large by its burst). Requests do not arrive
 * evenly: a bucket of one token denies about 30% of random (Poisson) arrivals at 0.8 of its rate,
 * one of 4 tokens about 4% (docs/quota-service.md, "Bursts").
 */
export const MIN_BURST = 4;

/**
 * The most a token bucket admits within `ttlMs` of its start: it starts full, and is filled
 * `floor(ttlMs / fillIntervalMs)` times before the assignment expires.
 */
export function capacityOf(s: Strategy, ttlMs: number): number {
  if (s.kind === 'deny-all') return 0;
  return s.maxTokens + s.tokensPerFill * Math.floor(ttlMs / s.fillIntervalMs);
}

/**
 * The bucket for `rate` per second: `rate / 10` tokens (at least 1) every `1000 * tokens / rate`
 * ms, so it admits about `rate` a second. It holds a quarter of a second of the rate, at least
 * one refill, and at least {@link MIN_BURST} tokens (or seconds of the rate, when less).
 */
function bucketFor(rate: number): TokenBucketStrategy {
  const perFill = Math.max(1, Math.round(rate / FILLS_PER_SECOND));
  const fillIntervalMs = Math.max(1, Math.floor((1000 * perFill) / rate));
  const least = Math.min(MIN_BURST, Math.ceil(rate * MIN_BURST));
  const maxTokens = Math.max(perFill, least, Math.ceil(rate * BURST_SECONDS));
  return { kind: 'token-bucket', maxTokens, tokensPerFill: perFill, fillIntervalMs };
}

/** The permits a share of `rate` per second needs for an assignment of `ttlMs` (what {@link strategyFor} admits at most). */
export function permitsFor(rate: number, ttlMs: number): number {
  return rate > 0 ? capacityOf(bucketFor(rate), ttlMs) : 0;
}

/**
 * The token bucket an Envoy serves `rate` per second with, admitting at most `held` permits
 * within `ttlMs` (what is taken in the store for it): the rate lowered until it fits what is
 * held; deny-all when nothing is.
 */
export function strategyFor(rate: number, held: number, ttlMs: number): Strategy {
  let r = rate;
  for (let i = 0; i < 8 && r > 0; i++) {
    const s = bucketFor(r);
    const capacity = capacityOf(s, ttlMs);
    if (capacity <= held) return s;
    r *= (held / capacity) * 0.99;
  }
  // Less than one permit per fill: the bucket starts with what is held and is never filled before it expires.
  if (held >= 1) return { kind: 'token-bucket', maxTokens: Math.floor(held), tokensPerFill: 1, fillIntervalMs: ttlMs + 1000 };
  return { kind: 'deny-all' };
}
