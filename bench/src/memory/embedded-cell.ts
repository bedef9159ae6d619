/**
 * One run of one cell of the embedded part, in a process of its own (embedded.ts runCell):
 * `node --expose-gc embedded-cell.js <contender> <keys> <callers> <warmupMs> <measureMs>`.
 * Prints the run's counts as JSON (a CellRun) on stdout.
 */
import { closedLoop, MAKERS, type CellRun, type EmbeddedContender } from './embedded.js';

const [name, keys, callers, warmupMs, measureMs] = process.argv.slice(2);
const make = MAKERS[name as EmbeddedContender];
if (make === undefined) throw new Error(`unknown contender ${String(name)}`);
const n = Number(keys);
const names = Array.from({ length: n }, (_, i) => (n === 1 ? 'hot' : `user-${i}`));
const contender = make();
const cpu = process.cpuUsage();
const r = await closedLoop(contender, names, Number(callers), Number(warmupMs), Number(measureMs));
const { user, system } = process.cpuUsage(cpu);
await contender.close();
const run: CellRun = { decisions: r.decisions, completed: r.completed, denied: r.denied, cpuUs: user + system };
process.stdout.write(JSON.stringify(run));
