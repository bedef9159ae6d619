/**
 * One contender of the throughput part in a process of its own, as an app calling one limiter
 * (throughput.ts ContenderProcess): `node --expose-gc throughput-worker.js <contender> <redisUrl>
 * <runId> <keys>`. It builds its contender, runs it a while unmeasured, answers `ready`, then runs the
 * slices of cells it is sent, one at a time.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { errorText } from '../harness/forked.js';
import {
  cycledLoop,
  LoopTally,
  PRIME_MS,
  throughputDecider,
  type FromContender,
  type ThroughputContender,
  type ToContender,
} from './throughput.js';

const [name, redisUrl, runId, keyCount] = process.argv.slice(2) as [ThroughputContender, string, string, string];

function send(message: FromContender): void {
  process.send!(message);
}

const decider = await throughputDecider(name, redisUrl, runId);
const names = new Map<number, readonly string[]>();
/** The keys of a cell: `hot`, or `user-0` .. `user-<count - 1>` cycled through. */
function keysOf(count: number): readonly string[] {
  let keys = names.get(count);
  if (keys === undefined) {
    keys = Array.from({ length: count }, (_, i) => (count === 1 ? 'hot' : `user-${i}`));
    names.set(count, keys);
  }
  return keys;
}

/** The current cell's figures, its slices added in turn. */
let tally = new LoopTally();

async function handle(message: ToContender): Promise<void> {
  switch (message.type) {
    case 'cell': {
      if (message.first) tally = new LoopTally();
      const { loop, cpuUs } = await cycledLoop(
        decider,
        keysOf(message.keys),
        message.inFlight,
        message.warmupMs,
        message.measureMs,
        tally,
      );
      const firstError = loop.firstError === undefined ? undefined : errorText(loop.firstError);
      send({ type: 'result', loop: { ...loop, firstError }, cpuUs });
      return;
    }
    case 'settle':
      (globalThis as { gc?: () => void }).gc?.();
      await sleep(100);
      send({ type: 'settled' });
      return;
    case 'quit':
      await decider.close();
      process.disconnect();
      return;
  }
}

// The parent went away (killed mid-run): nothing left to report to.
process.once('disconnect', () => process.exit(0));
process.on('message', (message: ToContender) => {
  handle(message).catch((err: unknown) => send({ type: 'failed', error: errorText(err) }));
});

// Compiling the contender's code would otherwise fall on its first cell: run it a while first,
// one call at a time and 16 at once, since a lone call and calls sent together may take paths of
// their own (Sluice's lone consume goes to a lean entry, calls at once to the batch).
for (const inFlight of [1, 16]) await cycledLoop(decider, keysOf(Number(keyCount)), inFlight, PRIME_MS, 0);
send({ type: 'ready' });
