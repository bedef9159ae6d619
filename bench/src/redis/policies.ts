/**
 * The other policies through Redis: the throughput part's closed loop (64 calls in flight, many
 * keys) on policies the one-limit path does not take, so that their cost stays in view: two
 * limits on a key, a sliding window, and a concurrency limit (each admission released at once).
 */
import { Limiter, type ResourceConfig } from '@sluice/core';
import type { Decider } from '../harness/contenders.js';
import { createSluiceStore, type StoreTarget } from '../harness/sluice-store.js';
import { fmt, fmtInt, type Table } from '../report/table.js';
import { cycledLoop, type LoopResult } from './throughput.js';

const GENEROUS = 1_000_000_000;

/** The policies measured, each on its own resource. */
const POLICIES: readonly { readonly name: string; readonly policy: ResourceConfig; readonly release?: boolean }[] = [
  { name: 'one token bucket (the one-limit path)', policy: { algorithm: 'token-bucket', limit: GENEROUS, burst: GENEROUS } },
  {
    name: 'token bucket + fixed window',
    policy: [
      { algorithm: 'token-bucket', limit: GENEROUS, burst: GENEROUS, id: 'rate' },
      { algorithm: 'fixed-window', limit: GENEROUS, windowMs: 60_000, id: 'minute' },
    ],
  },
  { name: 'sliding window', policy: { algorithm: 'sliding-window', limit: GENEROUS } },
  { name: 'concurrency (try, then release)', policy: { algorithm: 'concurrency', limit: GENEROUS }, release: true },
];

/** One policy's cell. */
export interface PolicyCell extends LoopResult {
  readonly name: string;
  /** CPU of this process per decision over the cell, µs. */
  readonly clientUsecPerDecision: number;
}

/** A decider on its own limiter and store, deciding with `try` (and releasing at once if asked). */
async function policyDecider(target: StoreTarget, resource: string, policy: ResourceConfig, release: boolean): Promise<Decider> {
  const store = await createSluiceStore(target);
  const limiter = new Limiter({ resources: { [resource]: policy }, store });
  return {
    decide: async (key) => {
      const d = await limiter.try(resource, { key });
      if (d.source === 'fallback') throw new Error('fallback decision');
      if (release && d.permitId !== undefined) await limiter.release(resource, { key, permitId: d.permitId });
      return d.allowed;
    },
    close: async () => {
      await limiter.close();
      await store.close();
    },
  };
}

/** Runs each policy for `warmupMs` + `measureMs` at `inFlight` calls over `keys` keys. */
export async function runPolicies(
  target: StoreTarget,
  runId: string,
  settings: { readonly warmupMs: number; readonly measureMs: number; readonly keys: number; readonly inFlight: number },
  between: () => Promise<void>,
  progress: (line: string) => void,
): Promise<PolicyCell[]> {
  const keys = Array.from({ length: settings.keys }, (_, i) => `user-${i}`);
  const cells: PolicyCell[] = [];
  for (const [i, p] of POLICIES.entries()) {
    const decider = await policyDecider(target, `bench:${runId}:policy${i}`, p.policy, p.release === true);
    try {
      const { loop: r, cpuUs } = await cycledLoop(decider, keys, settings.inFlight, settings.warmupMs, settings.measureMs);
      cells.push({ ...r, name: p.name, clientUsecPerDecision: r.completed === 0 ? NaN : cpuUs / r.completed });
      progress(`  ${p.name}: ${fmtInt(r.perSec)}/s`);
    } finally {
      await decider.close();
    }
    await between();
  }
  return cells;
}

/** The table of the policies part. */
export function policiesTable(cells: readonly PolicyCell[], inFlight: number, keys: number): Table {
  return {
    title: `Other policies through Redis (${inFlight} in flight, ${fmtInt(keys)} keys)`,
    header: ['policy', 'decisions/s', 'allowed', 'p50 us', 'p99 us', 'client CPU us/dec', 'errors'],
    rows: cells.map((c) => [
      c.name,
      fmtInt(c.perSec),
      c.decisions === 0 ? 'n/a' : `${((100 * c.allowed) / c.decisions).toFixed(1)}%`,
      fmtInt(c.p50),
      fmtInt(c.p99),
      fmt(c.clientUsecPerDecision, 1),
      String(c.errors),
    ]),
    notes: [
      'Sluice `try` on its own Limiter and RedisStore per policy, every limit generous so each call is admitted. Only a',
      'policy of one token bucket, GCRA or fixed window takes the one-limit path; the others take the general one. A',
      "concurrency decision is released at once (a second round trip, shared by the tick's other releases).",
    ],
  };
}
