/**
 * One of the processes of the accuracy part: on `prepare` it builds its limiter, on `go` it keeps
 * `inFlight` calls outstanding (a closed loop: far more demand than the shared limit) until the
 * run ends and reports when each admitted call's decision arrived.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { wallNow, type AccuracySpec, type FromWorker, type ToWorker } from './accuracy-protocol.js';
import { rlfDecider, sluiceDecider, type Decider } from './contenders.js';

let decider: Decider | undefined;
let inFlight = 1;
/** Redis times of the current run's admissions, when the contender reports them. */
let decided: number[] | undefined;

function send(message: FromWorker): void {
  process.send!(message);
}

async function build(redisUrl: string, spec: AccuracySpec): Promise<Decider> {
  if (spec.contender === 'rlf') {
    decided = undefined;
    return rlfDecider(redisUrl, spec.keyPrefix, spec.limit, 1);
  }
  const times: number[] = [];
  decided = times;
  const policy = {
    algorithm: spec.algorithm,
    limit: spec.limit,
    windowMs: 1000,
    ...(spec.algorithm === 'sliding-window' ? {} : { burst: spec.burst }),
  };
  return sluiceDecider(redisUrl, spec.resource, policy, (t) => times.push(t));
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
    }
  };
  await Promise.all(Array.from({ length: inFlight }, caller));
  return { type: 'result', admitted, decided, decisions, errors, ...(firstError === undefined ? {} : { firstError }) };
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
    send({ type: 'failed', error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
  });
});
