import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { invalidRules, type RuleIssue } from './errors.js';
import { compileRules, ruleSetOf, type CompileRulesOptions, type RuleSet, type RuleSetParts } from './ruleset.js';

/**
 * Texts of at least this many bytes (UTF-8) are compiled in a worker thread. Compiling takes
 * about 3 µs a byte (YAML parsing most of it), so a smaller text holds the event loop for at
 * most ~25 ms, less than starting a thread costs.
 */
export const OFF_THREAD_BYTES = 8 * 1024;
/** Most rule texts compiled in worker threads at once; further ones wait for a turn. */
export const MAX_COMPILE_THREADS = 2;

/** What the worker thread posts back. */
export type WorkerAnswer =
  | { readonly ok: true; readonly parts: RuleSetParts }
  | { readonly ok: false; readonly issues: readonly RuleIssue[] }
  | { readonly ok: false; readonly message: string };

// The built worker sits next to this module; from TypeScript sources (the unit tests) there is
// none, and texts are compiled on the calling thread.
const WORKER = new URL('./compile-worker.js', import.meta.url);
const workerBuilt = existsSync(fileURLToPath(WORKER));

let running = 0;
const waiting: (() => void)[] = [];

async function turn(): Promise<void> {
  if (running < MAX_COMPILE_THREADS) {
    running++;
    return;
  }
  // The slot is handed over by the finishing compile, so `running` stays counted.
  await new Promise<void>((resolve) => waiting.push(resolve));
}

function release(): void {
  const next = waiting.shift();
  if (next) next();
  else running--;
}

/** Structured cloning drops freezing; the rule set is frozen all the way down, as compiled. */
function deepFreeze<T>(value: T): T {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return value;
  if (value instanceof Map) {
    for (const v of value.values()) deepFreeze(v);
  } else {
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return Object.freeze(value);
}

function runWorker(text: string, options: CompileRulesOptions, url: URL): Promise<WorkerAnswer> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(url, { workerData: { text, options } });
    let answer: WorkerAnswer | undefined;
    worker.once('message', (m: WorkerAnswer) => (answer = m));
    worker.once('error', reject);
    // Settled once the thread is gone: nothing of it outlives the call.
    worker.once('exit', (code) => {
      if (answer !== undefined) resolve(answer);
      else reject(new Error(`the rule compiler thread exited with code ${code} without an answer`));
    });
  });
}

/** Options of {@link compileRulesOffThread}. */
export interface CompileOffThreadOptions extends CompileRulesOptions {
  /**
   * The worker script. Tests that run from TypeScript sources point this at the built one.
   * @default the `compile-worker.js` next to this module, when it exists
   */
  workerUrl?: URL;
  /**
   * Texts smaller than this many bytes are compiled on the calling thread.
   * @default {@link OFF_THREAD_BYTES}
   */
  offThreadBytes?: number;
}

/**
 * {@link compileRules} without holding the event loop: a text of {@link OFF_THREAD_BYTES} or
 * more is parsed, validated and compiled in a worker thread (one per text, ended when it
 * answers; at most {@link MAX_COMPILE_THREADS} at once), and only the finished rule set is
 * rebuilt here. Rejects with the same `SLUICE_ERR_INVALID_RULES` as `compileRules`.
 *
 * @example
 * const rules = await compileRulesOffThread(text, { file: 'rules.yaml' });
 */
export async function compileRulesOffThread(text: string, options: CompileOffThreadOptions): Promise<RuleSet> {
  const { workerUrl, offThreadBytes = OFF_THREAD_BYTES, ...compile } = options;
  const url = workerUrl ?? (workerBuilt ? WORKER : undefined);
  if (url === undefined || typeof text !== 'string' || Buffer.byteLength(text, 'utf8') < offThreadBytes) {
    return compileRules(text, compile);
  }
  await turn();
  let answer: WorkerAnswer;
  try {
    answer = await runWorker(text, compile, url);
  } finally {
    release();
  }
  if (answer.ok) return ruleSetOf(deepFreeze(answer.parts));
  if ('issues' in answer) throw invalidRules(answer.issues);
  throw new Error(`the rule compiler thread failed: ${answer.message}`);
}
