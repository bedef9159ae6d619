/**
 * The embedded store beside rate-limiter-flexible's memory limiter: decisions per second in one
 * process, no I/O, as a web app calling the limiter on every request pays them.
 */
import { Limiter, MemoryStore, rateLimit } from '@sluice/core';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { fmt, fmtInt, fmtRatio, type Table } from '../report/table.js';

/** A limit no cell reaches: every call is admitted and charged. */
const HIGH = 1_000_000_000;

/** Targets of the part, as ratios to RLF's `RateLimiterMemory.consume` in the same cell. */
export const EMBEDDED_TARGETS = Object.freeze({
  /** `Limiter.try` (token bucket) on the MemoryStore. */
  tryRatio: 1,
  /** `rateLimit().try` (sliding window, its default). */
  rateLimitRatio: 0.5,
});

/** One way of asking for a decision on a key; resolves to true when admitted. */
interface Contender {
  readonly name: EmbeddedContender;
  readonly decide: (key: string) => Promise<boolean>;
  close(): Promise<void>;
}

export type EmbeddedContender = 'try' | 'rateLimit' | 'rlf';

const LABELS: Record<EmbeddedContender, string> = {
  try: 'Limiter.try, token bucket',
  rateLimit: 'rateLimit().try, sliding window',
  rlf: 'RLF RateLimiterMemory.consume',
};

export interface EmbeddedSettings {
  readonly warmupMs: number;
  readonly measureMs: number;
  /** Rounds of every cell; a cell's figure is the median of its rounds. */
  readonly rounds: number;
  /** Distinct keys of the "many keys" cells. */
  readonly keys: number;
  readonly callers: readonly number[];
}

export interface EmbeddedCell {
  readonly contender: EmbeddedContender;
  /** 1: the hot key. */
  readonly keys: number;
  readonly callers: number;
  /** Decisions per second of each round, in the order run. */
  readonly rounds: number[];
  /** The median of `rounds`. */
  readonly perSec: number;
  /** CPU time per decision over the rounds (measured window and warm-up), microseconds. */
  readonly cpuUsecPerDecision: number;
  readonly denied: number;
}

export interface EmbeddedResult {
  readonly settings: EmbeddedSettings;
  readonly cells: readonly EmbeddedCell[];
}

function sluiceTry(): Contender {
  const store = new MemoryStore();
  const limiter = new Limiter({
    store,
    closeStore: true,
    resources: { api: { algorithm: 'token-bucket', limit: HIGH, burst: HIGH } },
  });
  return {
    name: 'try',
    decide: async (key) => (await limiter.try('api', { key })).allowed,
    close: () => limiter.close(),
  };
}

function sluiceRateLimit(): Contender {
  const perKey = rateLimit({ limit: HIGH, windowMs: 1000 });
  return {
    name: 'rateLimit',
    decide: async (key) => (await perKey.try(key)).allowed,
    close: () => perKey.close(),
  };
}

function rlfMemory(): Contender {
  const rlf = new RateLimiterMemory({ points: HIGH, duration: 1 });
  return {
    name: 'rlf',
    decide: async (key) => {
      try {
        await rlf.consume(key);
        return true;
      } catch (rejected) {
        if (rejected instanceof Error) throw rejected;
        return false;
      }
    },
    close: () => Promise.resolve(),
  };
}

export const MAKERS: Record<EmbeddedContender, () => Contender> = { try: sluiceTry, rateLimit: sluiceRateLimit, rlf: rlfMemory };

/** Decisions between clock reads, so reading the clock costs little beside a decision. */
const CHUNK = 64;

/**
 * `callers` async loops, each awaiting one decision after the other for `warmupMs + measureMs`
 * over `keys` keys (each caller starting at its own key). The clock is read once per chunk; a
 * chunk counts when it ends inside the measured window.
 */
export async function closedLoop(
  c: Contender,
  keys: readonly string[],
  callers: number,
  warmupMs: number,
  measureMs: number,
): Promise<{ decisions: number; completed: number; denied: number }> {
  const start = performance.now();
  const measureFrom = start + warmupMs;
  const end = measureFrom + measureMs;
  const counts = { decisions: 0, completed: 0, denied: 0 };
  const caller = async (first: number): Promise<void> => {
    let i = first;
    let t = start;
    while (t < end) {
      let denied = 0;
      for (let j = 0; j < CHUNK; j++) {
        if (!(await c.decide(keys[i]!))) denied++;
        i = i + 1 === keys.length ? 0 : i + 1;
      }
      t = performance.now();
      counts.completed += CHUNK;
      if (t >= measureFrom && t < end) {
        counts.decisions += CHUNK;
        counts.denied += denied;
      }
    }
  };
  await Promise.all(Array.from({ length: callers }, (_, n) => caller(Math.floor((n * keys.length) / callers))));
  return counts;
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** What one run of a cell reports from its process (embedded-cell.ts). */
export interface CellRun {
  readonly decisions: number;
  readonly completed: number;
  readonly denied: number;
  /** CPU time of the run (warm-up included), microseconds. */
  readonly cpuUs: number;
}

const CELL_SCRIPT = fileURLToPath(new URL('./embedded-cell.js', import.meta.url));

/** Runs one contender on one cell in a Node process of its own (see runEmbedded). */
async function runCell(name: EmbeddedContender, keys: number, callers: number, s: EmbeddedSettings): Promise<CellRun> {
  const args = ['--expose-gc', CELL_SCRIPT, name, String(keys), String(callers), String(s.warmupMs), String(s.measureMs)];
  const { stdout } = await promisify(execFile)(process.execPath, args, { timeout: 60_000 + s.warmupMs + s.measureMs });
  return JSON.parse(stdout) as CellRun;
}

/**
 * Every cell, `rounds` times, the contenders interleaved cell by cell (so slow drift of a shared
 * machine falls on all of them). Each run is a Node process of its own, as an app that calls one
 * limiter is: run one after the other in one process, a limiter's optimized code also serves
 * the others' calls and the other parts' (in one run, Limiter.try fell from 2.8M to 1.5-1.8M
 * decisions/s once the other contenders' cells had run beside it). `between` runs after each run.
 */
export async function runEmbedded(
  s: EmbeddedSettings,
  between: () => Promise<void>,
  progress: (line: string) => void,
): Promise<EmbeddedResult> {
  const contenders: EmbeddedContender[] = ['try', 'rateLimit', 'rlf'];
  const specs = s.callers.flatMap((callers) => [s.keys, 1].map((keys) => ({ keys, callers })));
  const runs = new Map<string, { perSec: number[]; cpu: number; completed: number; denied: number }>();
  const id = (c: EmbeddedContender, keys: number, callers: number) => `${c}/${keys}/${callers}`;
  for (let round = 0; round < s.rounds; round++) {
    for (const { keys, callers } of specs) {
      // The order rotates with the round, so no contender always runs first after a pause.
      for (let k = 0; k < contenders.length; k++) {
        const name = contenders[(k + round) % contenders.length]!;
        const r = await runCell(name, keys, callers, s);
        const entry = runs.get(id(name, keys, callers)) ?? { perSec: [], cpu: 0, completed: 0, denied: 0 };
        entry.perSec.push(r.decisions / (s.measureMs / 1000));
        entry.cpu += r.cpuUs;
        entry.completed += r.completed;
        entry.denied += r.denied;
        runs.set(id(name, keys, callers), entry);
        progress(
          `  round ${round + 1}: ${LABELS[name].padEnd(32)} ${keys === 1 ? '    hot' : `${fmtInt(keys).padStart(5)} keys`} x${callers} ${fmtInt(r.decisions / (s.measureMs / 1000))}/s`,
        );
        await between();
      }
    }
  }
  const cells: EmbeddedCell[] = [];
  for (const { keys, callers } of specs) {
    for (const name of contenders) {
      const e = runs.get(id(name, keys, callers))!;
      cells.push({
        contender: name,
        keys,
        callers,
        rounds: e.perSec,
        perSec: median(e.perSec),
        cpuUsecPerDecision: e.completed === 0 ? NaN : e.cpu / e.completed,
        denied: e.denied,
      });
    }
  }
  return { settings: s, cells };
}

function cellOf(r: EmbeddedResult, name: EmbeddedContender, keys: number, callers: number): EmbeddedCell | undefined {
  return r.cells.find((c) => c.contender === name && c.keys === keys && c.callers === callers);
}

function where(keys: number, callers: number): string {
  return `${keys === 1 ? 'hot key' : `${fmtInt(keys)} keys`}, ${callers} caller${callers === 1 ? '' : 's'}`;
}

/** The targets of the part with their verdicts, one row per cell and contender judged. */
export function embeddedVerdicts(r: EmbeddedResult): [target: string, measured: string, verdict: string][] {
  const out: [string, string, string][] = [];
  for (const rlf of r.cells.filter((c) => c.contender === 'rlf')) {
    for (const [name, target] of [
      ['try', EMBEDDED_TARGETS.tryRatio],
      ['rateLimit', EMBEDDED_TARGETS.rateLimitRatio],
    ] as const) {
      const c = cellOf(r, name, rlf.keys, rlf.callers)!;
      const ratio = c.perSec / rlf.perSec;
      const clean = c.denied === 0 && rlf.denied === 0;
      out.push([
        `Embedded: ${LABELS[name]} >= ${fmt(target, 1)}x RLF memory (${where(rlf.keys, rlf.callers)})`,
        `${fmtRatio(ratio)} (${fmtInt(c.perSec)} vs ${fmtInt(rlf.perSec)}/s)${clean ? '' : ', with denials'}`,
        ratio >= target && clean ? 'PASS' : 'MISS',
      ]);
    }
  }
  return out;
}

/** The table of the part: each contender's median, its rounds, CPU per decision, and ratios to RLF. */
export function embeddedTable(r: EmbeddedResult): Table {
  const s = r.settings;
  const rows: string[][] = [];
  const specs = [...new Map(r.cells.map((c) => [`${c.keys}/${c.callers}`, c])).values()];
  for (const spec of specs) {
    const rlf = cellOf(r, 'rlf', spec.keys, spec.callers)!;
    for (const name of ['try', 'rateLimit', 'rlf'] as const) {
      const c = cellOf(r, name, spec.keys, spec.callers)!;
      rows.push([
        LABELS[name],
        spec.keys === 1 ? '1 (hot)' : fmtInt(spec.keys),
        String(spec.callers),
        fmtInt(c.perSec),
        c.rounds.map((x) => fmt(x / 1e6, 2)).join(' / '),
        fmt(c.cpuUsecPerDecision, 3),
        name === 'rlf' ? '-' : fmtRatio(c.perSec / rlf.perSec),
        name === 'rlf' ? '-' : `${name === 'try' ? '>= 1.00x' : `>= ${fmt(EMBEDDED_TARGETS.rateLimitRatio, 2)}x`}`,
        name === 'rlf' ? '-' : c.perSec / rlf.perSec >= (name === 'try' ? 1 : EMBEDDED_TARGETS.rateLimitRatio) ? 'PASS' : 'MISS',
      ]);
    }
  }
  return {
    title: 'Embedded store: decisions per second in one process, beside RLF RateLimiterMemory',
    header: ['contender', 'keys', 'callers', 'decisions/s', 'rounds (M/s)', 'CPU us/dec', 'vs RLF', 'target', 'result'],
    rows,
    notes: [
      `Each cell: ${s.warmupMs} ms warm-up then ${s.measureMs} ms measured, ${s.rounds} rounds with the contenders interleaved`,
      'cell by cell (their order rotating each round), each run in a Node process of its own (as an app calling one',
      "limiter; in one shared process each contender's optimized code also serves the others'); the figure is the median round.",
      'N async callers each `await` one decision after the other, cycling through the keys (each caller from its own',
      'point), limit never reached (10^9 per second): every call is admitted and charged. Limiter.try: a Limiter on',
      "a MemoryStore, one token-bucket limit (burst 10^9), `try('api', { key })`. rateLimit: `rateLimit({ limit,",
      'windowMs: 1000 })` as it comes (sliding window), `try(key)`. RLF: `new RateLimiterMemory({ points, duration: 1',
      '})`, `consume(key)` (a fixed window). CPU us/dec: CPU time of the process per decision over the rounds.',
    ],
  };
}
