/**
 * One of the processes of the accuracy part: on `prepare` it builds its limiter, on `go` it keeps
 * `inFlight` calls outstanding (a closed loop: far more demand than the shared limit) until the
 * run ends and reports when each admitted call's decision arrived.
 */
import { setImmediate as yieldToLoop, setTimeout as sleep } from 'node:timers/promises';
import { wallNow, type AccuracySpec, type FromWorker, type ToWorker } from './accuracy-protocol.js';
import { rlfDecider, sluiceDecider, type Decider } from '../harness/contenders.js';
import { defaultsDecider, type FallbackStats } from './defaults-under-load.js';
import { errorText } from '../harness/forked.js';

/**
 * The Redis store's command timeout in the accuracy runs. Four processes flooding one key and
 * Redis share two cores here: a process can be off the CPU for longer than the store's 50 ms
 * default, and a reply that waited for it would count as a timeout and a fallback decision.
 * Accuracy is about the limit, so the runs allow Redis a second (the outage part tests timeouts).
 */
const COMMAND_TIMEOUT_MS = 1000;

let decider: Decider | undefined;
let inFlight = 1;
/** Redis times of the current run's admissions, when the contender reports them. */
let decided: number[] | undefined;
/** Fallback decisions and switches of the current run (runs with `defaults`). */
let stats: (() => FallbackStats) | undefined;

function send(message: FromWorker): void {
  process.send!(message);
}

async function build(redisUrl: string, spec: AccuracySpec): Promise<Decider> {
  stats = undefined;
  if (spec.contender === 'sluice' && spec.defaults !== undefined) {
    const built = await defaultsDecider(redisUrl, spec, spec.defaults);
    decided = built.decided;
    stats = built.stats;
    return built.decider;
  }
  if (spec.contender === 'rlf') {
    decided = undefined;
    return rlfDecider(redisUrl, spec.keyPrefix, spec.limit, 1);
  }
  const policy = {
    algorithm: spec.algorithm,
    limit: spec.limit,
    windowMs: 1000,
    ...(spec.algorithm === 'sliding-window' ? {} : { burst: spec.burst }),
  };
  if (spec.lease === true) {
    // Leased permits are served locally, later than the store granted them: only arrival
    // times say when they were used.
    decided = undefined;
    return sluiceDecider(redisUrl, spec.resource, policy, { lease: true, commandTimeoutMs: COMMAND_TIMEOUT_MS });
  }
  const times: number[] = [];
  decided = times;
  return sluiceDecider(redisUrl, spec.resource, policy, {
    onAdmitted: (t) => times.push(t),
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
  });
}

async function drive(d: Decider, startAt: number, durationMs: number): Promise<FromWorker> {
  await sleep(Math.max(0, startAt - wallNow()));
  const end = startAt + durationMs;
  const admitted: number[] = [];
  let decisions = 0;
  let errors = 0;
  let firstError: string | undefined;
  const caller = async (): Promise<void> => {
    while (wallNow() < end) {
      try {
        const ok = await d.decide('shared');
        decisions++;
        if (ok) admitted.push(wallNow());
      } catch (err) {
        errors++;
        firstError ??= err instanceof Error ? err.message : String(err);
        // A failing store answers at once; do not spin on it.
        await sleep(1);
      }
      // A decision made locally (pre-filter, lease) settles without I/O: without this, 64 callers
      // would loop on microtasks alone and starve the event loop, so store replies already in
      // would wait behind them and time out, which a server taking its calls from sockets never
      // does to itself.
      await yieldToLoop();
    }
  };
  await Promise.all(Array.from({ length: inFlight }, caller));
  return {
    type: 'result',
    admitted,
    decided,
    decisions,
    errors,
    ...(firstError === undefined ? {} : { firstError }),
    ...(stats === undefined ? {} : stats()),
  };
}

async function handle(message: ToWorker): Promise<void> {
  switch (message.type) {
    case 'prepare':
      await decider?.close();
      inFlight = message.inFlight;
      decider = await build(message.redisUrl, message.spec);
      send({ type: 'ready' });
      return;
    case 'go':
      if (decider === undefined) throw new Error('go before prepare');
      send(await drive(decider, message.startAt, message.durationMs));
      await decider.close();
      decider = undefined;
      return;
    case 'quit':
      await decider?.close();
      decider = undefined;
      process.disconnect();
      return;
  }
}

// The parent went away (killed mid-run): nothing left to report to.
process.once('disconnect', () => process.exit(0));

process.on('message', (message: ToWorker) => {
  handle(message).catch((err: unknown) => {
    send({ type: 'failed', error: errorText(err) });
  });
});
