/**
 * Worker thread entry of `compileRulesOffThread`: compiles one rule text (in `workerData`) and
 * posts the rule set's parts, or its issues, back. The thread then ends.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { isRulesError } from './errors.js';
import { compileRuleParts, type CompileRulesOptions } from './ruleset.js';
import type { WorkerAnswer } from './off-thread.js';

const job = workerData as { text: string; options: CompileRulesOptions };
let answer: WorkerAnswer;
try {
  answer = { ok: true, parts: compileRuleParts(job.text, job.options) };
} catch (e) {
  answer = isRulesError(e)
    ? { ok: false, issues: e.issues }
    : { ok: false, message: e instanceof Error ? (e.stack ?? e.message) : String(e) };
}
parentPort!.postMessage(answer);
