/**
 * Redis must decide exactly as the in-memory store does. Random sequences of calls go to Redis;
 * the same calls are then replayed on a MemoryStore whose clock is set to the time each Redis
 * call decided at (ConsumeResult.now), and every result must be equal to the bit. The memory
 * store runs the core's evaluateKey/adjustKey, so this checks the Lua against the TypeScript
 * operation by operation, including expiry, policy changes and several calls per batch.
 *
 * Statuses are whole numbers, so a drift in the last bit of a stored state could hide behind
 * them for a long time: after every tick the state Redis stores is also decoded and compared
 * with the states a replay through the core's pure functions keeps (test/reference.ts),
 * bookings (the ledger pair) included.
 *
 * Failures print their seed; rerun with SLUICE_SEED=<seed> to replay.
 */
import {
  ErrorCodes,
  MemoryStore,
  isSluiceError,
  compileLimits,
  type BookingVerdict,
  type BookResult,
  type BookingBounds,
  type Clock,
  type CompiledLimit,
  type ConsumeResult,
  type LimitPolicy,
  type LimitStore,
  type ReserveResult,
  type TimerHandle,
} from '@sluice/core';
import { Redis, type Cluster } from 'ioredis';
import { RedisStore, keyNames } from '../src/index.js';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { redisUrl } from '../../../test/env.js';
import { TEST_COMMAND_TIMEOUT_MS, cleanUp, prng, sleep, standalone, testSeed } from './helpers.js';
import { unpack, type Packed } from './msgpack.js';
import { ReferenceStore } from './reference.js';

/** A clock the replay sets to each Redis decision time. */
class SetClock implements Clock {
  value = 0;
  now(): number {
    return this.value;
  }
  setTimer(): TimerHandle {
    return {};
  }
  clearTimer(): void {}
}

type Step =
  | { op: 'consume'; key: string; limits: readonly CompiledLimit[]; cost: number; permitId: string; coreShare: number }
  | { op: 'adjust'; key: string; limits: readonly CompiledLimit[]; delta: number; at?: number }
  | { op: 'reserve'; key: string; limits: readonly CompiledLimit[]; min: number; max: number; holdMs: number }
  | { op: 'renew' | 'release'; key: string; limits: readonly CompiledLimit[]; permitId: string; ttlMs?: number }
  | {
      op: 'book';
      key: string;
      limits: readonly CompiledLimit[];
      cost: number;
      id: string;
      token: string;
      create: boolean;
      bounds: BookingBounds;
    }
  | { op: 'cancel'; key: string; limits: readonly CompiledLimit[]; id: string; token: string };

interface Scenario {
  name: string;
  /** Policies a key may switch between (by limit id, so state carries over). */
  variants: LimitPolicy[][];
  /** Largest cost to draw. */
  maxCost: number;
}

const RATE = ['token-bucket', 'gcra', 'sliding-window', 'fixed-window', 'sliding-log'] as const;

function scenarios(): Scenario[] {
  const single = RATE.map((algorithm): Scenario => ({
    name: algorithm,
    variants: [
      [{ algorithm, id: 'r', limit: 5, windowMs: 200, burst: 3, slices: 4 }],
      [{ algorithm, id: 'r', limit: 8, windowMs: 150, burst: 8, slices: 5 }],
      [{ algorithm, id: 'r', limit: 3, windowMs: 70, burst: 2, slices: 1 }],
      // No spare burst: a booking's span is one emission interval.
      [{ algorithm, id: 'r', limit: 10, windowMs: 100, burst: 1, slices: 2 }],
    ].map((v) => v.map((p) => strip(p))),
    maxCost: 4,
  }));
  return [
    ...single,
    {
      // More groups than the window keeps (8 per slice): the merges must match bit for bit.
      name: 'sliding-window merging groups',
      variants: [
        [{ algorithm: 'sliding-window', id: 'r', limit: 40, windowMs: 200, slices: 1 }],
        [{ algorithm: 'sliding-window', id: 'r', limit: 30, windowMs: 150, slices: 2 }],
      ],
      maxCost: 3,
    },
    {
      // Bookings past a full window go to the windows after it, kept as pairs ahead.
      name: 'fixed windows booked ahead',
      variants: [
        [{ algorithm: 'fixed-window', id: 'f', limit: 2, windowMs: 40 }],
        [{ algorithm: 'fixed-window', id: 'f', limit: 3, windowMs: 70 }],
      ],
      maxCost: 2,
    },
    {
      // Few groups (8), so bookings stamped ahead merge with admissions.
      name: 'sliding-window bookings merging',
      variants: [
        [{ algorithm: 'sliding-window', id: 's', limit: 12, windowMs: 150, slices: 1 }],
        [{ algorithm: 'sliding-window', id: 's', limit: 10, windowMs: 100, slices: 1 }],
      ],
      maxCost: 2,
    },
    {
      // Every limit books its share; a policy change drops the bookings (not the charges).
      name: 'rate limits booked together',
      variants: [
        [
          { algorithm: 'token-bucket', id: 'a', limit: 6, windowMs: 100, burst: 3 },
          { algorithm: 'fixed-window', id: 'b', limit: 4, windowMs: 60 },
          { algorithm: 'sliding-log', id: 'c', limit: 5, windowMs: 120 },
        ],
        [
          { algorithm: 'gcra', id: 'a', limit: 5, windowMs: 80, burst: 3 },
          { algorithm: 'fixed-window', id: 'b', limit: 4, windowMs: 60 },
        ],
      ],
      maxCost: 2,
    },
    {
      name: 'algorithm changes on one limit id',
      variants: RATE.map((algorithm, i) => [
        strip({ algorithm, id: 'main', limit: 4 + i, windowMs: 90 + 30 * i, burst: 3 + i, slices: 3 }),
      ]),
      maxCost: 3,
    },
    {
      name: 'concurrency',
      variants: [
        [{ algorithm: 'concurrency', id: 'c', limit: 3, permitTtlMs: 60 }],
        [{ algorithm: 'concurrency', id: 'c', limit: 2, permitTtlMs: 25 }],
      ],
      maxCost: 2,
    },
    {
      name: 'mixed limits, added and removed',
      variants: [
        [
          { algorithm: 'token-bucket', id: 'a', limit: 10, windowMs: 120, burst: 4 },
          { algorithm: 'sliding-window', id: 'b', limit: 6, windowMs: 200, slices: 5 },
          { algorithm: 'concurrency', id: 'c', limit: 3, permitTtlMs: 80 },
        ],
        [
          { algorithm: 'gcra', id: 'a', limit: 7, windowMs: 100, burst: 3 },
          { algorithm: 'fixed-window', id: 'd', limit: 5, windowMs: 90 },
        ],
        [
          { algorithm: 'sliding-log', id: 'b', limit: 5, windowMs: 150 },
          { algorithm: 'concurrency', id: 'c', limit: 2, permitTtlMs: 40 },
          { algorithm: 'token-bucket', id: 'd', limit: 9, windowMs: 60 },
        ],
        // The same id switching between rate and concurrency drops its state.
        [{ algorithm: 'concurrency', id: 'a', limit: 2, permitTtlMs: 50 }],
      ],
      maxCost: 3,
    },
  ];
}

/** Keeps only the fields the algorithm uses, so compileLimits accepts the policy. */
function strip(p: LimitPolicy): LimitPolicy {
  const { algorithm, id, limit, windowMs, burst, slices } = p;
  const out: LimitPolicy = { algorithm, id, limit, windowMs };
  if (algorithm === 'token-bucket' || algorithm === 'gcra') out.burst = Math.min(burst ?? limit, limit * 2);
  if (algorithm === 'sliding-window') out.slices = slices;
  return out;
}

/**
 * A consume's core share, as the limiter sends it for traffic outside the core class: none most of
 * the time, else any double in 0.1..0.5 (so that floor(coreShare * capacity) is taken from
 * arbitrary bits, not only from round shares).
 */
function randomCoreShare(rnd: () => number): number {
  return rnd() < 0.6 ? 0 : 0.1 + 0.4 * rnd();
}

/** A resource's booking bounds, short enough that bookings come due and expire within a test. */
function randomBounds(rnd: () => number): BookingBounds {
  const pick = (xs: readonly number[]) => xs[Math.floor(rnd() * xs.length)]!;
  return {
    maxAheadMs: pick([20, 80, 300]),
    claimWindowMs: pick([3, 20, 60]),
    maxBookings: pick([1, 3, 20]),
    maxShare: pick([0.25, 0.5, 1]),
  };
}

/** The token a booking's own maker shows: one per id. */
const ownToken = (id: string): string => `the-own-token-of-${id}`;

/** A call's token: most often the id's own, else another caller's or none (refused when held). */
function randomToken(rnd: () => number, id: string): string {
  const r = rnd();
  return r < 0.8 ? ownToken(id) : r < 0.92 ? 'another-callers-token' : '';
}

/**
 * One tick's calls, made together so that they share one batch (and one Redis time): at most 7,
 * as the store sends 8 or more as two calls.
 */
function randomTick(
  rnd: () => number,
  keys: string[],
  policy: Map<string, readonly CompiledLimit[]>,
  compiled: (readonly CompiledLimit[])[],
  maxCost: number,
  stamps: readonly number[] = [],
  held: ReadonlyMap<string, readonly string[]> = new Map(),
): Step[] {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const steps: Step[] = [];
  const n = rnd() < 0.6 ? 1 : 1 + Math.floor(rnd() * 6);
  for (let i = 0; i < n; i++) {
    const key = pick(keys);
    if (rnd() < 0.08) policy.set(key, pick(compiled));
    const limits = policy.get(key)!;
    const hasPermits = limits.some((l) => l.algorithm === 'concurrency');
    const permitId = hasPermits ? `permit-${Math.floor(rnd() * 4)}` : '';
    if (!hasPermits && rnd() < 0.25) {
      // A small pool of ids, so that later calls claim, re-book or cancel earlier bookings; more
      // often one held, so that claims come within spans.
      const ids = held.get(key) ?? [];
      const id = ids.length > 0 && rnd() < 0.6 ? pick(ids) : `b${Math.floor(rnd() * 3)}`;
      const token = randomToken(rnd, id);
      if (rnd() < 0.2) steps.push({ op: 'cancel', key, limits, id, token });
      else {
        const cost = 1 + Math.floor(rnd() * maxCost);
        steps.push({ op: 'book', key, limits, cost, id, token, create: rnd() < 0.75, bounds: randomBounds(rnd) });
      }
      continue;
    }
    const r = rnd();
    if (r < 0.6) {
      const cost = Math.floor(rnd() * (maxCost + 1));
      steps.push({ op: 'consume', key, limits, cost, permitId, coreShare: randomCoreShare(rnd) });
    } else if (r < 0.75) {
      // Now and then far beyond any limit: the bounds on adjustments must agree too.
      const scale = rnd() < 0.1 ? 1000 : 1;
      const delta = (Math.floor(rnd() * (2 * maxCost + 1)) - maxCost) * scale;
      // A lease returning unused permits names its reservation's stamp.
      const at = delta < 0 && stamps.length > 0 && rnd() < 0.5 ? pick(stamps) : 0;
      steps.push({ op: 'adjust', key, limits, delta, ...(at > 0 ? { at } : {}) });
    } else if (r < 0.85 && !hasPermits) {
      const max = 1 + Math.floor(rnd() * 2 * maxCost);
      // A lease's hold: none, or a stamp ahead of now that windows count the permits at.
      const holdMs = rnd() < 0.5 ? 0 : 1 + Math.floor(rnd() * 80);
      steps.push({ op: 'reserve', key, limits, min: Math.floor(rnd() * (max + 1)), max, holdMs });
    } else if (hasPermits) {
      const ttl = rnd() < 0.5 ? undefined : 10 + Math.floor(rnd() * 60);
      steps.push({ op: rnd() < 0.5 ? 'renew' : 'release', key, limits, permitId, ...(ttl === undefined ? {} : { ttlMs: ttl }) });
    } else steps.push({ op: 'consume', key, limits, cost: 0, permitId, coreShare: randomCoreShare(rnd) });
  }
  // Every tick reports its time through a consume or a reservation (a booking may be refused).
  if (!steps.some((s) => s.op === 'consume' || s.op === 'reserve')) {
    const key = pick(keys);
    const limits = policy.get(key)!;
    const permitId = limits.some((l) => l.algorithm === 'concurrency') ? 'permit-0' : '';
    steps.push({ op: 'consume', key, limits, cost: Math.floor(rnd() * 2), permitId, coreShare: randomCoreShare(rnd) });
  }
  return steps;
}

/** A call refused with an error: its code (a booking held under another token). */
interface Refused {
  readonly refused: string;
}

type Outcome = ConsumeResult | ReserveResult | BookResult | boolean | void | Refused;

/** The code of a refused booking call, as both stores and the reference refuse it. */
function refusedCode(err: unknown): Refused {
  if (!isSluiceError(err, ErrorCodes.BOOKING_TOKEN)) throw err;
  return { refused: err.code };
}

async function run(store: LimitStore, step: Step): Promise<Outcome> {
  try {
    return await runStep(store, step);
  } catch (err) {
    return refusedCode(err);
  }
}

function runStep(store: LimitStore, step: Step): Promise<Outcome> {
  switch (step.op) {
    case 'book':
      return store.book!(step);
    case 'cancel':
      return store.cancel!(step);
    case 'consume':
      return store.consume(step);
    case 'adjust':
      return store.adjust(step);
    case 'reserve':
      return store.reserve(step);
    case 'renew':
      return store.renew(step);
    case 'release':
      return store.release(step);
  }
}

function replay(ref: ReferenceStore, step: Step, now: number): Outcome {
  try {
    return replayStep(ref, step, now);
  } catch (err) {
    return refusedCode(err);
  }
}

function replayStep(ref: ReferenceStore, step: Step, now: number): Outcome {
  switch (step.op) {
    case 'book':
      return ref.book(step.key, step.limits, step, now);
    case 'cancel':
      return ref.cancel(step.key, step.limits, step.id, step.token, now);
    case 'consume':
      return ref.consume(step.key, step.limits, step.cost, step.permitId, step.coreShare, now);
    case 'adjust':
      return ref.adjust(step.key, step.limits, step.delta, now, step.at);
    case 'reserve':
      return ref.reserve(step.key, step.limits, step.min, step.max, now, step.holdMs);
    case 'renew':
    case 'release':
      return ref.permit(step.op, step.key, step.limits, step.permitId, step.op === 'renew' ? step.ttlMs : undefined, now);
  }
}

/** Redis' clock (ms), a key's value and its PTTL, all read at one instant (one script). */
const READ_ENTRY = `local t = redis.call('TIME')
return { t[1], t[2], redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1]) }`;

async function readEntry(admin: Redis | Cluster, key: string): Promise<{ now: number; pttl: number; raw: Buffer | null }> {
  const [sec, usec, pttl, raw] = (await admin.callBuffer('EVAL', READ_ENTRY, 1, key)) as [Buffer, Buffer, number, Buffer | null];
  return { now: Number(sec.toString()) * 1000 + Math.floor(Number(usec.toString()) / 1000), pttl, raw };
}

/**
 * Checks that Redis stores exactly the states the reference keeps for `key` (as of the
 * decision at `now`). Times are compared on the store's clock, read with the entry: a stall
 * between the decision and this check (a loaded machine) changes nothing.
 */
async function expectStored(
  admin: Redis | Cluster,
  prefix: string,
  key: string,
  ref: ReferenceStore,
  now: number,
  context: string,
) {
  const entry = ref.entries.get(key);
  // Expired entries are dropped lazily by both, and by Redis' own expiry too: nothing to compare.
  if (entry !== undefined && entry.expiresAt <= now) return;
  const names = keyNames(prefix, key);
  const read = await readEntry(admin, names.state);
  // Ended since the decision: Redis may have removed it by now.
  if (entry !== undefined && entry.expiresAt <= read.now) return;
  const raw = read.raw;
  if (entry === undefined) {
    expect(raw, `${context}: no entry expected`).toBeNull();
    return;
  }
  // An entry whose limits hold no state is kept too, until it ends.
  const defined = entry.limits.flatMap((l, i) => (entry.states[i] === undefined ? [] : [{ limit: l, state: entry.states[i] }]));
  expect(raw, `${context}: entry expected`).not.toBeNull();
  const blob = unpack(raw!) as Packed[];
  expect(blob[0], `${context}: entry expiry`).toBe(entry.expiresAt);
  // Redis removes the key by itself only well after the entry's end.
  expect(blob[1] as number, `${context}: Redis expiry`).toBeGreaterThanOrEqual(entry.expiresAt + 1000);
  expect(read.now + read.pttl, `${context}: PTTL`).toBeGreaterThanOrEqual(entry.expiresAt + 900);
  const stored = new Map<string, Packed>();
  for (let i = 2; i < blob.length; i += 2) stored.set(blob[i] as string, blob[i + 1]!);
  // The bookings: {7, policy, newest, marks (false where a limit keeps none), "id token", cost, start, end, ...}.
  const ledger = entry.ledger;
  const bookings = ledger && [7, ledger.policy, ledger.newest, ledger.marks.map((m) => m ?? false)];
  for (const b of ledger?.bookings ?? []) bookings!.push(`${b.id} ${b.token}`, b.cost, b.start, b.end);
  expect(stored.get('!b'), `${context}: bookings`).toEqual(bookings);
  stored.delete('!b');
  expect([...stored.keys()].sort(), `${context}: limit ids`).toEqual(defined.map((d) => d.limit.id).sort());
  for (const { limit, state } of defined) {
    if (limit.algorithm !== 'concurrency') {
      expect(stored.get(limit.id), `${context}: state of ${limit.id}`).toEqual(state);
      continue;
    }
    const held = (state as readonly { id: string; cost: number; expiresAt: number }[])
      .slice()
      .sort((a, b) => (a.id < b.id ? -1 : 1));
    const scores = await admin.zrange(names.permits, 0, -1, 'WITHSCORES');
    const costs = await admin.hgetall(names.costs);
    const inRedis = [];
    for (let i = 0; i < scores.length; i += 2)
      inRedis.push({ id: scores[i]!, cost: Number(costs[scores[i]!]), expiresAt: Number(scores[i + 1]) });
    inRedis.sort((a, b) => (a.id < b.id ? -1 : 1));
    expect(inRedis, `${context}: permits of ${limit.id}`).toEqual(held);
    expect(Object.keys(costs).length, `${context}: permit costs`).toBe(held.length);
    expect(stored.get(limit.id), `${context}: permit total`).toEqual([6, held.reduce((sum, l) => sum + l.cost, 0)]);
  }
}

/** What the bookings of the whole file came to (checked by its last test: every path was run). */
const tally = new Map<BookingVerdict | 'cancelled' | 'not held' | 'refused', number>();
function count(step: Step, result: Outcome): void {
  const what =
    typeof result === 'object' && 'refused' in result
      ? 'refused'
      : step.op === 'book'
        ? (result as BookResult).outcome
        : step.op === 'cancel'
          ? result
            ? 'cancelled'
            : 'not held'
          : undefined;
  if (what !== undefined) tally.set(what, (tally.get(what) ?? 0) + 1);
}

/**
 * Runs ticks on Redis, replays each on a MemoryStore and on the reference at the time Redis
 * decided it, and checks that results and stored states are equal.
 */
function differential(store: LimitStore, admin: Redis | Cluster, prefix: string) {
  const clock = new SetClock();
  const oracle = new MemoryStore({ clock, sweepIntervalMs: 0 });
  const ref = new ReferenceStore();
  const stamps: number[] = [];
  const held = new Map<string, string[]>();
  const last: Outcome[] = [];
  let previousNow = -Infinity;
  return {
    /** Makes `batch` in one tick; returns the number of calls checked. */
    async tick(batch: Step[], keys: readonly string[], context: string): Promise<number> {
      const results = await Promise.all(batch.map((s) => run(store, s)));
      const nows = results.flatMap((r) => (typeof r === 'object' && 'now' in r ? [r.now] : []));
      // Calls made in one tick are decided by one script call, at one instant.
      expect(new Set(nows).size, context).toBe(1);
      const now = nows[0]!;
      expect(now, context).toBeGreaterThanOrEqual(previousNow);
      previousNow = now;
      clock.value = now;
      for (let i = 0; i < batch.length; i++) {
        const expected = await run(oracle, batch[i]!);
        const call = `${context}, call ${i}: ${JSON.stringify(batch[i])}`;
        expect(results[i], call).toEqual(expected);
        expect(replay(ref, batch[i]!, now), `${call}: the reference drifted from MemoryStore`).toEqual(expected);
        count(batch[i]!, expected);
      }
      for (const key of keys) await expectStored(admin, prefix, key, ref, now, `${context}, after the tick, key ${key}`);
      batch.forEach((step, i) => {
        const r = results[i] as ReserveResult;
        if (step.op === 'reserve' && r.granted > 0) stamps.push(now + step.holdMs);
        if (step.op === 'book' || step.op === 'cancel') {
          const ids = (held.get(step.key) ?? []).filter((id) => id !== step.id);
          if (step.op === 'book' && (results[i] as BookResult).outcome === 'booked') ids.push(step.id);
          held.set(step.key, ids);
        }
      });
      last.splice(0, last.length, ...results);
      return batch.length;
    },
    /** The results of the last tick, as Redis answered them. */
    last,
    /** Stamps of the reservations made so far, for refunds that name one. */
    stamps,
    /** By key, the ids of bookings last answered as booked, for calls that claim them. */
    held,
    close: () => oracle.close(),
  };
}

describe('differential: Redis decides exactly as the in-memory store', () => {
  const target = standalone('diff');
  const store = target.store();
  const admin = target.admin();
  // The same program run as a script, as on a Redis without functions.
  const noFunctions = new Redis(redisUrl());
  vi.spyOn(noFunctions, 'fcall').mockRejectedValue(
    Object.assign(new Error("ERR unknown command 'fcall', with args beginning with: "), { name: 'ReplyError' }),
  );
  const scriptStore = new RedisStore({ client: noFunctions, prefix: target.prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
  afterAll(async () => {
    await store.close();
    await scriptStore.close();
    noFunctions.disconnect();
    await cleanUp(admin, target.prefix);
  });

  it.each(scenarios())('$name', async (scenario) => {
    const seed = testSeed();
    const rnd = prng(seed);
    const context = `scenario "${scenario.name}", seed ${seed} (rerun with SLUICE_SEED=${seed})`;
    const compiled = scenario.variants.map((v) => compileLimits(v));
    const keys = [`${scenario.name}:a:${seed}`, `${scenario.name}:b:${seed}`];
    const policy = new Map(keys.map((k) => [k, compiled[0]!]));
    const diff = differential(store, admin, target.prefix);
    let steps = 0;
    for (let tick = 0; tick < 160; tick++) {
      steps += await diff.tick(
        randomTick(rnd, keys, policy, compiled, scenario.maxCost, diff.stamps, diff.held),
        keys,
        `${context}, tick ${tick}`,
      );
      const pause = rnd();
      if (pause < 0.3) await sleep(Math.floor(rnd() * 40));
      else if (pause < 0.5) await sleep(1);
    }
    await diff.close();
    expect(steps).toBeGreaterThan(160);
  });

  describe.each([
    ['function', store],
    ['script', scriptStore],
  ] as const)('as a %s', (_form, formStore) => {
    const a = compileLimits([
      { algorithm: 'token-bucket', id: 'a', limit: 4, windowMs: 60_000 },
      { algorithm: 'concurrency', id: 'c', limit: 2, permitTtlMs: 60_000 },
    ]);
    const b = compileLimits([{ algorithm: 'fixed-window', id: 'b', limit: 1, windowMs: 60_000 }]);
    const asPermits = compileLimits([{ algorithm: 'concurrency', id: 'a', limit: 2, permitTtlMs: 60_000 }]);
    const rate = compileLimits([{ algorithm: 'fixed-window', id: 'a', limit: 5, windowMs: 60_000 }]);
    const consume = (key: string, limits: readonly CompiledLimit[], cost: number, permitId = '', coreShare = 0): Step => ({
      op: 'consume',
      key,
      limits,
      cost,
      permitId,
      coreShare,
    });
    // A tick reports its time through a consume: one on a key of its own for ticks without.
    const timed = (key: string, batch: Step[]) => [...batch, consume(`${key}:clock`, rate, 0)];

    it('follows a key through policy changes, with denied and allowed calls in between', async () => {
      const key = `other-policy:${_form}:${testSeed()}`;
      const diff = differential(formStore, admin, target.prefix);
      const ticks: Step[][] = [
        [consume(key, a, 1, 'l1')],
        // Denied under another policy, then back.
        [consume(key, b, 2)],
        timed(key, [{ op: 'reserve', key, limits: b, min: 2, max: 2, holdMs: 0 }]),
        [consume(key, a, 1, 'l2')],
        [consume(key, a, 1, 'l1', 0.5)],
        timed(key, [{ op: 'release', key, limits: a, permitId: 'l1' }]),
        // Allowed under b: only b's state is kept.
        [consume(key, b, 1)],
        [consume(key, a, 1, 'l2')],
      ];
      for (const [i, batch] of ticks.entries()) await diff.tick(batch, [key], `${_form}, tick ${i}`);
      await diff.close();
    });

    it('keeps an entry whose limits hold no state, as the key table does', async () => {
      const key = `empty:${_form}:${testSeed()}`;
      const diff = differential(formStore, admin, target.prefix);
      const ticks: Step[][] = [
        [consume(key, rate, 1)],
        // Refunded to nothing: the entry stays until the window ends.
        timed(key, [{ op: 'adjust', key, limits: rate, delta: -1 }]),
        // A release finds the entry, so it is written, with no permit.
        timed(key, [{ op: 'release', key, limits: asPermits, permitId: 'x' }]),
        [consume(key, asPermits, 1, 'x')],
        timed(key, [{ op: 'renew', key, limits: asPermits, permitId: 'x', ttlMs: 30_000 }]),
        [consume(key, rate, 2), { op: 'adjust', key, limits: rate, delta: -2 }],
      ];
      for (const [i, batch] of ticks.entries()) await diff.tick(batch, [key], `${_form}, tick ${i}`);
      await diff.close();
    });

    it('books, claims, cancels and lets bookings expire, as the key table does', async () => {
      const key = `book:${_form}:${testSeed()}`;
      const fwKey = `${key}:fw`;
      const diff = differential(formStore, admin, target.prefix);
      // One permit per 100 ms, a burst of 3: a booking waits 100 ms per missing permit.
      const tb = compileLimits([{ algorithm: 'token-bucket', id: 't', limit: 10, windowMs: 1000, burst: 3 }]);
      const gcra = compileLimits([{ algorithm: 'gcra', id: 't', limit: 10, windowMs: 1000, burst: 3 }]);
      const fw = compileLimits([{ algorithm: 'fixed-window', id: 'f', limit: 2, windowMs: 100 }]);
      const both = compileLimits([
        { algorithm: 'gcra', id: 't', limit: 10, windowMs: 1000, burst: 3 },
        { algorithm: 'fixed-window', id: 'f', limit: 2, windowMs: 100 },
      ]);
      // The same window id with shorter windows: booked pairs of 100 ms stay ahead with a gap.
      const fwShort = compileLimits([{ algorithm: 'fixed-window', id: 'f', limit: 2, windowMs: 30 }]);
      const swKey = `${key}:sw`;
      const gapKey = `${key}:gap`;
      // A bucket that frees a permit in 10 ms beside a window of a minute, then of a second: the
      // booking falls inside the running (long) window, which it must be counted in.
      const longKey = `${key}:long`;
      const fast = { algorithm: 'token-bucket', id: 't', limit: 100, windowMs: 1000, burst: 3 } as const;
      const long = compileLimits([fast, { algorithm: 'fixed-window', id: 'f', limit: 5, windowMs: 60_000 }]);
      const shorter = compileLimits([fast, { algorithm: 'fixed-window', id: 'f', limit: 5, windowMs: 1000 }]);
      const sw = compileLimits([
        { algorithm: 'sliding-window', id: 's', limit: 2, windowMs: 50, slices: 1 },
        { algorithm: 'sliding-log', id: 'l', limit: 2, windowMs: 50 },
      ]);
      const bounds = { maxAheadMs: 1000, claimWindowMs: 60, maxBookings: 5, maxShare: 1 };
      const book = (k: string, limits: readonly CompiledLimit[], cost: number, id: string, create = true): Step => ({
        op: 'book',
        key: k,
        limits,
        cost,
        id,
        token: ownToken(id),
        create,
        bounds,
      });
      const cancel = (k: string, limits: readonly CompiledLimit[], id: string): Step => ({
        op: 'cancel',
        key: k,
        limits,
        id,
        token: ownToken(id),
      });
      // A tick, or a pause (ms); a tick's results are checked where one instant decides them.
      const script: (Step[] | number | { tick: Step[]; outcomes: unknown[] })[] = [
        // Full, booked, cancelled at once: the newest booking, so the bucket takes it back.
        { tick: [consume(key, tb, 3), book(key, tb, 1, 'a'), cancel(key, tb, 'a')], outcomes: [true, 'booked', true] },
        [book(key, tb, 1, 'a'), book(key, tb, 1, 'b')],
        // No longer the newest: kept.
        timed(key, [cancel(key, tb, 'a')]),
        [book(key, tb, 1, 'b', false), book(key, tb, 1, 'never', false)],
        220,
        [book(key, tb, 1, 'b', false)],
        // A whole burst leaves no span to claim in.
        [book(key, tb, 3, 'c'), book(key, tb, 1, 'd')],
        // d (if booked) expires: the next call gives it back.
        400,
        [consume(key, tb, 0)],
        // Another policy: the bookings go, the charges stay.
        [consume(key, tb, 3), book(key, tb, 1, 'e'), book(key, gcra, 1, 'e', false)],
        // Windows ahead: x and z share the next window, y takes the one after, w the fourth.
        {
          tick: [
            consume(fwKey, fw, 2),
            book(fwKey, fw, 1, 'x'),
            book(fwKey, fw, 2, 'y'),
            book(fwKey, fw, 1, 'z'),
            book(fwKey, fw, 1, 'w'),
            cancel(fwKey, fw, 'x'),
          ],
          outcomes: [true, 'booked', 'booked', 'booked', 'booked', true],
        },
        120,
        [book(fwKey, fw, 1, 'z', false), book(fwKey, fw, 1, 'v')],
        120,
        [book(fwKey, fw, 2, 'y', false), consume(fwKey, fw, 1)],
        // Two limits booked together, then a policy change drops their bookings.
        [consume(fwKey, both, 2), book(fwKey, both, 1, 'm'), book(fwKey, both, 1, 'n')],
        timed(fwKey, [cancel(fwKey, both, 'n')]),
        [book(fwKey, fw, 1, 'm', false)],
        500,
        [consume(key, tb, 1), consume(fwKey, fw, 1)],
        // After a change of window length a booked window lies past a gap: the next booking takes
        // the gap rather than the (full) window after it.
        {
          tick: [consume(gapKey, fw, 2), book(gapKey, fw, 2, 'p'), book(gapKey, fwShort, 2, 'q')],
          outcomes: [true, 'booked', 'booked'],
        },
        // Sliding windows: s1 ends at +110 ms and s2 waits for it to leave (+160 .. +220); once
        // s1's stamp has left the window, giving it back must not take from s2's charge.
        {
          tick: [consume(swKey, sw, 2), book(swKey, sw, 1, 's1'), book(swKey, sw, 2, 's2')],
          outcomes: [true, 'booked', 'booked'],
        },
        190,
        [consume(swKey, sw, 0)],
        { tick: [consume(longKey, long, 3), book(longKey, shorter, 1, 'r')], outcomes: [true, 'booked'] },
      ];
      const outcome = (r: Outcome) =>
        typeof r === 'object' ? ('outcome' in r ? r.outcome : 'refused' in r ? r.refused : r.allowed) : r;
      for (const [i, entry] of script.entries()) {
        if (typeof entry === 'number') await sleep(entry);
        else if (Array.isArray(entry)) await diff.tick(entry, [key, fwKey, swKey, gapKey, longKey], `${_form}, step ${i}`);
        else {
          await diff.tick(entry.tick, [key, fwKey, swKey, gapKey, longKey], `${_form}, step ${i}`);
          expect(diff.last.map(outcome), `${_form}, step ${i}`).toEqual(entry.outcomes);
        }
      }
      await diff.close();
    });
  });

  // Last: the random and scripted runs above went through every booking path.
  it('ran every booking outcome', () => {
    for (const what of ['admitted', 'booked', 'claimed', 'denied', 'missing', 'cancelled', 'not held', 'refused'] as const) {
      expect(tally.get(what) ?? 0, `${what} in ${JSON.stringify([...tally])}`).toBeGreaterThan(0);
    }
  });
});
