import cluster, { type Worker } from 'node:cluster';
import { Counter, Gauge, Registry } from 'prom-client';
import type { Logger } from 'pino';
import { ClientCounter } from '../clients/client-ids.js';
import type { Settings } from '../settings.js';
import {
  CLIENTS_REPORT_MS,
  GATHER_TIMEOUT_MS,
  WORKER_SLOT_ENV,
  isSluiceMessage,
  type GatherKind,
  type PrimaryMessage,
  type WorkerMessage,
} from './protocol.js';

/** The first wait before a worker that died is replaced; it doubles while workers die young. */
export const RESTART_DELAY_MS = 100;
/** The longest wait before a replacement. */
export const MAX_RESTART_DELAY_MS = 10_000;
/** A worker that served this long before dying is replaced after the first delay again. */
const YOUNG_MS = 10_000;

/** The replacement delay after a worker of `slot` died `lived` ms after it started, given the delay before. */
export function nextRestartDelay(previous: number | undefined, livedMs: number): number {
  if (previous === undefined || livedMs >= YOUNG_MS) return RESTART_DELAY_MS;
  return Math.min(MAX_RESTART_DELAY_MS, previous * 2);
}

interface Slot {
  readonly slot: number;
  worker: Worker | undefined;
  startedAt: number;
  serving: boolean;
  delayMs: number | undefined;
  timer: NodeJS.Timeout | undefined;
}

interface Gathering {
  readonly from: Worker;
  readonly id: number;
  readonly kind: GatherKind;
  readonly waiting: Set<number>;
  readonly values: unknown[];
  readonly timer: NodeJS.Timeout;
}

/**
 * The primary of `sluice serve --workers N`: forks N workers sharing the HTTP and gRPC ports
 * (node:cluster hands each connection to one of them in turn), replaces a worker that dies (after
 * a delay that doubles while they die young), passes SIGHUP on to every worker, and on SIGTERM or
 * SIGINT tells every worker to drain and exits once all have: 0 when every one exited cleanly.
 * Workers run this process' command line again (node:cluster's default), stdout and stderr
 * shared. It decides nothing itself: it gathers the workers' figures for `/metrics` and `/v1/stats` and
 * counts the live remote clients over them. Resolves to the exit code.
 */
export function runPrimary(settings: Settings, logger: Logger): Promise<number> {
  const registry = new Registry();
  const restarts = new Counter({
    name: 'sluice_worker_restarts_total',
    help: 'Workers replaced after they died, by the slot they served',
    labelNames: ['worker'] as const,
    registers: [registry],
  });
  const live = new Gauge({
    name: 'sluice_workers',
    help: 'Worker processes serving (of --workers)',
    registers: [registry],
    aggregator: 'sum',
  });
  const clients = new ClientCounter();
  const slots: Slot[] = Array.from({ length: settings.workers }, (_, i) => ({
    slot: i + 1,
    worker: undefined,
    startedAt: 0,
    serving: false,
    delayMs: undefined,
    timer: undefined,
  }));
  const gatherings = new Map<number, Gathering>();
  let nextCollect = 1;
  let stopping = false;
  let started = false;
  let exitCode = 0;
  let resolveDone: (code: number) => void = () => {};
  const done = new Promise<number>((r) => (resolveDone = r));

  const send = (w: Worker, m: PrimaryMessage) => {
    if (w.isConnected()) w.send(m);
  };
  const liveWorkers = () => slots.flatMap((s) => (s.worker === undefined ? [] : [s.worker]));

  const fork = (s: Slot) => {
    s.timer = undefined;
    s.serving = false;
    s.startedAt = Date.now();
    const w = cluster.fork({ [WORKER_SLOT_ENV]: String(s.slot) });
    s.worker = w;
    w.on('message', (m: unknown) => {
      if (isSluiceMessage<WorkerMessage>(m)) receive(s, w, m);
    });
    w.once('exit', (code: number | null, signal: string | null) => exited(s, w, code, signal));
  };

  const receive = (s: Slot, w: Worker, m: WorkerMessage) => {
    switch (m.sluice) {
      case 'serving':
        // A worker still starting when the primary was told to stop may have missed its
        // `shutdown` (sent before it listened): it is told again now that it listens.
        if (stopping) {
          send(w, { sluice: 'shutdown' });
          return;
        }
        s.serving = true;
        live.set(slots.filter((x) => x.serving).length);
        if (!started && slots.every((x) => x.serving)) {
          started = true;
          logger.info({ url: m.url, grpcPort: m.grpcPort, workers: slots.length }, 'sluice serving');
        } else if (started) {
          logger.info({ worker: s.slot, workerPid: w.process.pid }, 'worker replaced: serving again');
        }
        return;
      case 'gather':
        gather(w, m.id, m.kind, m.arg);
        return;
      case 'collected':
        collected(w, m.id, m.value, m.error);
        return;
      case 'clients':
        for (const [id, heartbeat] of m.seen) clients.note(id, heartbeat);
        for (const id of m.gone) clients.goodbye(id);
        return;
    }
  };

  const gather = (from: Worker, id: number, kind: GatherKind, arg: unknown) => {
    const targets = liveWorkers().filter((w) => w.isConnected());
    const cid = nextCollect++;
    const g: Gathering = {
      from,
      id,
      kind,
      waiting: new Set(targets.map((w) => w.id)),
      values: [],
      timer: setTimeout(() => finish(cid), GATHER_TIMEOUT_MS),
    };
    gatherings.set(cid, g);
    for (const w of targets) send(w, { sluice: 'collect', id: cid, kind, arg });
    if (g.waiting.size === 0) finish(cid);
  };

  const collected = (w: Worker, cid: number, value: unknown, error: string | undefined) => {
    const g = gatherings.get(cid);
    if (g === undefined || !g.waiting.delete(w.id)) return;
    // A worker still starting has no figures yet: the others' answer for the fleet meanwhile.
    if (error === undefined) g.values.push(value);
    if (g.waiting.size === 0) finish(cid);
  };

  const finish = (cid: number) => {
    const g = gatherings.get(cid);
    if (g === undefined) return;
    gatherings.delete(cid);
    clearTimeout(g.timer);
    if (g.waiting.size > 0)
      logger.warn({ kind: g.kind, missing: g.waiting.size }, 'workers did not answer in time: their figures are left out');
    const finishing =
      g.kind === 'metrics' ? registry.getMetricsAsJSON().then((own) => [...g.values, own]) : Promise.resolve(g.values);
    finishing.then(
      (values) => send(g.from, { sluice: 'gathered', id: g.id, values }),
      (err: unknown) => send(g.from, { sluice: 'gathered', id: g.id, error: String(err) }),
    );
  };

  const exited = (s: Slot, w: Worker, code: number | null, signal: string | null) => {
    if (s.worker === w) s.worker = undefined;
    live.set(slots.filter((x) => x.serving && x.worker !== undefined).length);
    s.serving = false;
    for (const [cid, g] of gatherings) {
      if (g.waiting.delete(w.id) && g.waiting.size === 0) finish(cid);
    }
    if (stopping) {
      if (code !== 0) exitCode = 1;
      logger.info({ worker: s.slot, workerPid: w.process.pid, code, signal }, 'worker exited');
      if (slots.every((x) => x.worker === undefined)) resolveDone(exitCode);
      return;
    }
    if (!started) {
      // A worker that cannot start (Redis away, a bad certificate) says why on its own; the
      // others would fail alike: stop them and exit as a single process would.
      logger.error({ worker: s.slot, code, signal }, 'a worker exited before serving: stopping the others');
      exitCode = code === 0 || code === null ? 1 : code;
      stop();
      return;
    }
    const lived = Date.now() - s.startedAt;
    s.delayMs = nextRestartDelay(s.delayMs, lived);
    restarts.inc({ worker: String(s.slot) });
    logger.error(
      { worker: s.slot, workerPid: w.process.pid, code, signal, livedMs: lived, restartInMs: s.delayMs },
      'worker died: replacing it',
    );
    s.timer = setTimeout(() => fork(s), s.delayMs);
  };

  // The live remote clients over every worker, sent to each while the count changes (and once a
  // report interval anyway, for a replaced worker).
  const countTimer = setInterval(() => {
    const count = clients.count();
    for (const w of liveWorkers()) send(w, { sluice: 'clients', count });
  }, CLIENTS_REPORT_MS);

  const stop = () => {
    if (stopping) return;
    stopping = true;
    clearInterval(countTimer);
    for (const s of slots) {
      clearTimeout(s.timer);
      s.timer = undefined;
    }
    for (const w of liveWorkers()) send(w, { sluice: 'shutdown' });
    if (liveWorkers().length === 0) resolveDone(exitCode);
  };

  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: stopping the workers now');
      for (const w of liveWorkers()) w.process.kill('SIGKILL');
      resolveDone(1);
      return;
    }
    logger.info({ signal, workers: liveWorkers().length }, 'signal received: the workers drain');
    stop();
  };
  const onHangup = () => {
    if (stopping) return;
    const workers = liveWorkers();
    logger.info({ workers: workers.length }, 'SIGHUP: every worker reads its configuration and rule files again');
    for (const w of workers) send(w, { sluice: 'reload' });
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  process.on('SIGHUP', onHangup);

  logger.info({ workers: slots.length }, 'starting workers');
  for (const s of slots) fork(s);
  return done.then((code) => {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
    process.off('SIGHUP', onHangup);
    for (const g of gatherings.values()) clearTimeout(g.timer);
    logger.info({ code }, 'shut down');
    return code;
  });
}
