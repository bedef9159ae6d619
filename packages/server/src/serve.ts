import type { AddressInfo } from 'node:net';
import type { Server as TlsServer } from 'node:tls';
import { Limiter, compileLimits, isOutcomeStore, type LimitStore, type OutcomeSource } from '@sluice/core';
import { RedisStore, memoryPolicyProblem } from '@sluice/redis';
import { FileRuleStore, RedisRuleStore, type RuleStore } from '@sluice/rules';
import type { Logger } from 'pino';
import { outcomeAccess } from './auth/auth.js';
import { BookingClients } from './clients/booking-clients.js';
import { startAdaptive } from './control/adaptive/runtime.js';
import { startServerClock } from './clock-skew.js';
import { OverrideTable } from './envoy/overrides.js';
import { LiveRules } from './live-rules.js';
import { readServerOtel, startServerOtel } from './otel.js';
import { ServerMetrics } from './metrics.js';
import { LatencyWindow } from './stats/latency.js';
import { buildHttpApp, statsOf, type HttpDeps } from './http/app.js';
import { FairTurns } from './fair-turns.js';
import { bindGrpc, buildGrpcServer, shutdownGrpc, type GrpcListener } from './grpc/server.js';
import { quotaService } from './quota/serve-quota.js';
import { WarningThrottle, createLogger, redactingLogger } from './logging.js';
import { followRuleFiles, seedRuleStore, watchRuleFiles } from './seed.js';
import { RateLimitService, type CohortOf } from './service/service.js';
import { RolloutRunner } from './rollout/runner.js';
import { RolloutMetrics } from './metrics.js';
import { SettingsError, type Settings } from './settings.js';
import { readTls } from './tls.js';
import type { WorkerLink } from './workers/link.js';
import { fleetOf } from './workers/fleet.js';

/** A running `sluice serve`. */
export interface RunningServer {
  /** Base URL of the HTTP API, e.g. `http://127.0.0.1:8080`; undefined with `--port off`. */
  readonly url: string | undefined;
  /** undefined with `--port off`. */
  readonly httpPort: number | undefined;
  /** undefined with `--grpc-port off`. */
  readonly grpcPort: number | undefined;
  readonly limiter: Limiter;
  readonly rules: LiveRules;
  readonly metrics: ServerMetrics;
  readonly logger: Logger;
  /**
   * The fleet's rule rollout as this server follows it (both built-in rule stores keep one):
   * `cohortOf(resource, key)` tags outcome reports with a key's cohort.
   */
  readonly rollout: RolloutRunner | undefined;
  /**
   * Reads the TLS files and the rule files again (what SIGHUP does): with `--rules-mode files` content that differs
   * from the version in force becomes a new version; with `seed` an empty store is seeded and a
   * differing file is warned about. Never throws: a file that cannot be applied is logged.
   */
  reload(): Promise<void>;
  /**
   * Graceful shutdown: stops accepting, lets in-flight calls finish within the grace period,
   * then ends remaining waits (answered `SLUICE_ERR_CLOSED`) and closes stores.
   */
  close(): Promise<void>;
}

/** Options of {@link startServer} beyond the settings. */
export interface StartOptions {
  /**
   * @default a pino logger at `settings.logLevel` on stdout, formatted as `settings.logFormat` says
   * (either way, credentials are redacted)
   */
  logger?: Logger;
  /** Places keys in cohorts: reported outcomes are tallied by cohort too (see `RateLimitService`). */
  cohortOf?: CohortOf;
  /** Downstream outcomes per cohort, judged by rollouts; without it only rejection ratios are. */
  outcomes?: OutcomeSource;
  /** The variables OpenTelemetry is set up from (`OTEL_*`, see `otel.ts`). @default process.env */
  env?: Readonly<Record<string, string | undefined>>;
  /**
   * This server is one worker of `sluice serve --workers N`: `/metrics` and `/v1/stats` answer
   * for every worker, and remote clients are counted over every worker. @default a single process
   */
  worker?: WorkerLink;
}

async function waitFor(probe: () => Promise<unknown>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await probe();
      return;
    } catch (err) {
      if (Date.now() >= deadline) throw new Error(`${what} did not answer within ${timeoutMs} ms`, { cause: err });
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]);
}

/** The stores the server decides and keeps rules in. */
interface Stores {
  readonly limitStore: LimitStore | undefined;
  readonly ruleStore: RuleStore;
  close(): Promise<void>;
}

/** The Redis the settings name, if any. */
function redisSourceOf(settings: Settings) {
  return settings.redisUrl !== undefined
    ? { url: settings.redisUrl }
    : settings.redisCluster !== undefined
      ? { clusterNodes: settings.redisCluster }
      : undefined;
}

async function openStores(settings: Settings, logger: Logger): Promise<Stores> {
  const redisSource = redisSourceOf(settings);
  if (redisSource === undefined) {
    const dir = settings.rulesDir ?? (settings.rules[0] === undefined ? undefined : `${settings.rules[0]}.versions`);
    if (dir === undefined) throw new SettingsError('give --rules FILE (or --rules-dir DIR) on the embedded store');
    const ruleStore = new FileRuleStore({ dir, logger });
    return { limitStore: undefined, ruleStore, close: () => ruleStore.close() };
  }
  // The store counts the servers sharing this Redis itself (its peer registry), which sizes the
  // fallback's share; its timeout adapts to Redis' latency unless --store-timeout-ms fixes it.
  const limitStore = new RedisStore({
    ...redisSource,
    prefix: settings.redisPrefix,
    ...(settings.storeTimeoutMs === undefined ? {} : { commandTimeoutMs: settings.storeTimeoutMs }),
  });
  const ruleStore = new RedisRuleStore({ ...redisSource, prefix: settings.redisPrefix, logger });
  try {
    // A first decision loads the scripts, so the first burst of calls does not wait for it.
    const warmup = {
      key: 'sluice:warmup',
      limits: compileLimits({ algorithm: 'fixed-window', limit: 1, windowMs: 1000 }),
      cost: 0,
      permitId: '',
    };
    await waitFor(() => limitStore.consume(warmup), 10_000, 'Redis');
    await warnOnEviction(limitStore, logger);
  } catch (err) {
    await ruleStore.close();
    await limitStore.close();
    throw err;
  }
  return {
    limitStore,
    ruleStore,
    close: async () => {
      await ruleStore.close();
      await limitStore.close();
    },
  };
}

/**
 * Warns at start when Redis could drop live limit state or grow without bound (see
 * `memoryPolicyProblem`); a Redis that refuses `CONFIG` is named, not refused.
 */
async function warnOnEviction(store: RedisStore, logger: Logger): Promise<void> {
  let policies;
  try {
    policies = await store.memoryPolicy();
  } catch (err) {
    logger.info(
      { err: err instanceof Error ? err.message : String(err) },
      "could not read Redis' memory policy (CONFIG GET refused): set maxmemory with maxmemory-policy noeviction",
    );
    return;
  }
  for (const p of policies) {
    const problem = memoryPolicyProblem(p);
    if (problem !== undefined) logger.warn({ node: p.node, maxmemory: p.maxmemory, policy: p.policy }, problem);
  }
}

/**
 * Starts `sluice serve`: opens the stores, seeds the rule store from the rule files when it is
 * empty, follows its versions live, and listens for HTTP and gRPC.
 */
export async function startServer(settings: Settings, options: StartOptions = {}): Promise<RunningServer> {
  const logger = redactingLogger(options.logger ?? (await createLogger(settings.logLevel, settings.logFormat)));
  // Read (and checked) before anything opens: a bad certificate stops the start, naming its file.
  const tls = readTls(settings);
  const otelEnv = readServerOtel(options.env ?? process.env);
  const metrics = new ServerMetrics();
  const warnings = new WarningThrottle(logger, (event) => metrics.warning(event));
  // One share of the event loop per address, over both listeners.
  const turns = new FairTurns({ maxClientQueued: settings.maxClientQueued });
  const stores = await openStores(settings, logger);
  // OpenTelemetry, when the OTEL_* variables ask for it: the SDK is not even loaded otherwise.
  const otel =
    otelEnv === undefined
      ? undefined
      : await startServerOtel(otelEnv, {
          registry: metrics.registry,
          storeAddress: stores.limitStore?.address,
          logger,
          warnings,
        });
  // The rollout starts after the limiter, which needs the adaptive hooks first.
  const running: { rollout?: RolloutRunner | undefined } = {};
  const adaptive = startAdaptive({
    ruleStore: stores.ruleStore,
    ...(settings.redisUrl === undefined && settings.redisCluster === undefined
      ? {}
      : { redis: { ...redisSourceOf(settings), prefix: settings.redisPrefix } }),
    metrics,
    logger,
    // The fleet's reported outcomes, as the store tallies them (read once the limiter exists).
    outcomes: { outcomeTotals: (resource, windowMs, cohort, read) => limiter.outcomeTotals(resource, windowMs, cohort, read) },
    // Limits stay put while a rollout runs or its promoted candidate is watched.
    hold: () => ['running', 'paused', 'watching'].includes(running.rollout?.state?.status ?? ''),
  });
  const clock = await startServerClock(stores.limitStore, settings, logger, metrics.clockSkew);
  const limiter = new Limiter({
    resources: {},
    ...(stores.limitStore === undefined ? {} : { store: stores.limitStore }),
    observer: adaptive.wrap(otel?.observer(metrics.observer) ?? metrics.observer),
    maxKeyLength: settings.maxKeyLength,
    maxWaitMs: settings.maxWaitMs,
    maxWaitersPerClient: settings.maxClientWaits,
    // The embedded store's bound: the limiter owns that store.
    ...(stores.limitStore === undefined ? { maxKeys: settings.maxKeys } : {}),
    onStoreFailure: settings.onStoreFailure,
    // Degradations (the store away, outcome reports not taken) as one line each way.
    logger,
    // Reported outcomes are tallied in the store (for outcomeTotals), when the store keeps tallies.
    tallyOutcomes: stores.limitStore === undefined || isOutcomeStore(stores.limitStore),
  });
  // The quota service (RLQS), told of each rule version.
  const quota = quotaService(
    () => rules,
    () => service,
    warnings,
  );
  const rules = new LiveRules({
    limiter,
    logger,
    onApplied: (e) => {
      metrics.rulesApplied(e.version, e.added.length, e.changed.length, e.removed.length);
      if (rules.version !== undefined) adaptive.applied(rules.version);
      quota.limitsChanged();
    },
  });
  let stopWatch: (() => void) | undefined;
  let closing = false;
  /** With --rules-mode files: the content hash of the rule files last followed. */
  let followedHash: string | undefined;
  const cleanup = async () => {
    warnings.close();
    turns.close();
    stopWatch?.();
    await rules.settled();
    await adaptive.close();
    await clock.monitor?.close();
    await limiter.close();
    await stores.close();
    await otel?.close();
  };
  try {
    if (settings.rulesMode === 'files') followedHash = (await followRuleFiles(stores.ruleStore, settings.rules, logger)).hash;
    else await seedRuleStore(stores.ruleStore, settings.rules, logger);
    const current = await stores.ruleStore.current();
    // A version found by the watch (from any server) is checked in slices: decisions go on.
    stopWatch = stores.ruleStore.watch((v) => void rules.update(v));
    if (current !== undefined) rules.apply(current);
    else logger.warn('no rules yet: decisions are refused until a version is applied through the admin API');
  } catch (err) {
    await cleanup();
    throw err;
  }

  // The fleet's reported outcomes as the store tallies them, unless the caller gives its own.
  const storeOutcomes: OutcomeSource = {
    outcomeTotals: (r, windowMs, cohort, read) => limiter.outcomeTotals(r, windowMs, cohort, read),
  };
  const rollout = startRollouts(
    stores.ruleStore,
    limiter,
    rules,
    metrics,
    settings,
    logger,
    options.outcomes ?? storeOutcomes,
    () => quota.limitsChanged(),
  );
  running.rollout = rollout;
  // Reported outcomes are tallied under the key's rollout cohort too, for the rollout's judge.
  const cohortOf: CohortOf | undefined =
    options.cohortOf ?? (rollout === undefined ? undefined : (resource, key) => rollout.cohortOf(resource, key));
  const overrides = new OverrideTable({
    limiter,
    maxOverrides: settings.maxOverrides,
    perMinute: settings.overridesPerMinute,
    idleMs: settings.overrideIdleMs,
    onRefused: () => metrics.overrideRefused(),
  });
  const service = new RateLimitService(limiter, rules, options.worker?.clients, {
    bookingClients: new BookingClients({ perClient: settings.maxBookingsPerClient, clients: settings.maxBookingClients }),
    overrides,
    clock,
    ...(cohortOf === undefined ? {} : { cohortOf }),
    ...(rollout === undefined ? {} : { rollout }),
  });
  // Ready means "can answer decisions": a rule version is in force and the server is not draining.
  // A store that is away degrades the answer (the body says which, and what answers meanwhile)
  // but keeps the server in its Service: decisions go on by the store-failure policy, and taking
  // every server out at once on a Redis blip would turn the blip into an outage.
  const readiness = async () => {
    const checks: Record<string, string> = {};
    checks.rules = rules.version === undefined ? 'no rule version yet' : `version ${rules.version.version}`;
    const probe = async (name: string, p: () => Promise<unknown>, meanwhile: string) => {
      try {
        await withTimeout(p(), 1000);
        checks[name] = 'ok';
        return true;
      } catch (err) {
        const why = err instanceof Error && /within \d+ ms$/.test(err.message) ? 'no answer within 1000 ms' : 'not answering';
        checks[name] = `unavailable (${why}): ${meanwhile}`;
        return false;
      }
    };
    const healthy = await Promise.all([
      probe(
        'limitStore',
        () => stores.limitStore?.ping() ?? Promise.resolve(),
        `decisions follow each resource's store-failure policy (default ${settings.onStoreFailure})`,
      ),
      probe('ruleStore', () => stores.ruleStore.current(), `the rules in force (${checks.rules}) stay until it answers`),
    ]);
    const ready = !closing && rules.version !== undefined;
    const status = closing
      ? 'draining'
      : rules.version === undefined
        ? 'starting'
        : healthy.every(Boolean)
          ? 'ready'
          : 'degraded';
    return { ready, status, checks };
  };
  // The p99 of decision latency over the last minute, for the health of /v1/stats: the decision
  // histogram's counts are read once a second, never per decision.
  const latency = new LatencyWindow(metrics.decisionDurations).start();
  const httpDeps: HttpDeps = {
    ...(tls === undefined ? {} : { tls }),
    settings,
    service,
    rules,
    ruleStore: stores.ruleStore,
    metrics,
    logger,
    warnings,
    readiness,
    closing: () => closing,
    adaptive: () => adaptive.status(),
    decisionLatency: () => latency.p99(),
    dashboard: settings.dashboard,
    turns,
    ...(otel?.tracing === undefined ? {} : { tracing: otel.tracing }),
    ...(rollout === undefined ? {} : { rollout }),
  };
  const fleet = options.worker === undefined ? undefined : fleetOf(options.worker, metrics, (admin) => statsOf(httpDeps, admin));
  const app = buildHttpApp({ ...httpDeps, ...(fleet === undefined ? {} : { fleet }) });
  // Who may report outcomes over gRPC; the HTTP app decides the same from the same settings.
  const reporters = outcomeAccess(settings);
  const grpcServer = buildGrpcServer({
    ...(tls === undefined ? {} : { tls }),
    service,
    metrics,
    warnings,
    bounds: { maxDescriptors: settings.maxDescriptors, maxKeyLength: settings.maxKeyLength },
    outcomes: {
      access: reporters,
      bounds: { maxBatch: settings.maxBatch, maxKeyLength: settings.maxKeyLength, maxCalls: settings.maxOutcomeCalls },
    },
    quota: { service: quota },
    token: settings.apiToken,
    maxMessageBytes: settings.maxBodyBytes,
    idleTimeoutMs: settings.idleTimeoutMs,
    bodyTimeoutMs: settings.bodyTimeoutMs,
    closing: () => closing,
    maxClientStreams: settings.maxClientStreams,
    writeTimeoutMs: settings.writeTimeoutMs,
    turns,
    ...(otel?.tracing === undefined ? {} : { tracing: otel.tracing }),
  });
  let grpcListener: GrpcListener | undefined;
  try {
    if (settings.port !== undefined) await app.listen({ host: settings.host, port: settings.port });
    if (settings.grpcPort !== undefined) {
      grpcListener = await bindGrpc(grpcServer, settings.host, settings.grpcPort, settings, {
        cut: (reason) => metrics.connectionClosed('grpc', reason),
        open: (delta) => metrics.connectionsOpen('grpc', delta),
      });
    }
  } catch (err) {
    await shutdownGrpc(grpcServer, 0);
    await app.close();
    latency.close();
    await rollout?.close();
    await cleanup();
    throw err;
  }
  const httpPort = settings.port === undefined ? undefined : (app.server.address() as AddressInfo).port;
  const grpcPort = grpcListener?.port;
  const host = settings.host === '0.0.0.0' || settings.host === '::' ? '127.0.0.1' : settings.host;
  const scheme = tls === undefined ? 'http' : 'https';
  const url = httpPort === undefined ? undefined : `${scheme}://${host.includes(':') ? `[${host}]` : host}:${httpPort}`;
  if (httpPort === undefined) {
    logger.warn('no HTTP listener (--port off): no JSON API, /healthz, /readyz, /metrics or dashboard');
  }
  logger.info(
    {
      url,
      grpcPort,
      tls: tls === undefined ? 'off' : tls.requestCert ? 'mutual' : 'on',
      store: stores.limitStore?.name ?? 'memory',
      version: rules.version?.version,
      ...(settings.dashboard && url !== undefined ? { dashboard: `${url}/dashboard` } : {}),
    },
    // A worker's line; its primary says `sluice serving` once every worker does.
    options.worker === undefined ? 'sluice serving' : 'worker serving',
  );
  // After its own line: the primary's `sluice serving` follows every worker's.
  options.worker?.serving(url, grpcPort);
  // Outcomes steer fleet breakers, rollouts and adaptive limits: say who may send them.
  if (reporters.reporters.length === 0) {
    logger.info(
      'outcome reports are refused: no credential may send them (set --outcomes-token or --admin-token; --open-outcomes on takes them from anyone)',
    );
  } else {
    logger.info({ reporters: reporters.reporters }, 'outcome reports accepted from the holders of these credentials');
  }
  if (settings.openOutcomes) {
    logger.warn(
      { host: settings.host },
      'outcome reports are open (--open-outcomes on): whoever reaches the ports can open breakers, roll rollouts back and move adaptive limits',
    );
  }
  if (settings.apiToken === undefined && !isLoopback(settings.host)) {
    logger.warn(
      { host: settings.host },
      'decisions are served beyond this machine without --api-token: whoever reaches the ports can check, charge and refund any key',
    );
  }

  // The rule files, read again on SIGHUP (reload) and, with --rules-mode files, when one changes.
  // A file that cannot be applied is logged and counted; the version in force stays.
  let rereading: Promise<void> = Promise.resolve();
  const rereadRuleFiles = (why: string): Promise<void> => {
    const run = rereading.then(async () => {
      if (closing || settings.rules.length === 0) return;
      try {
        if (settings.rulesMode === 'files') {
          // On SIGHUP the files win whatever they hold; on a change seen on disk, only new content.
          const r = await followRuleFiles(stores.ruleStore, settings.rules, logger, why === 'SIGHUP' ? undefined : followedHash);
          followedHash = r.hash;
          if (r.outcome === 'unchanged') logger.info({ version: r.version, why }, 'rule files read again: no change');
          if (r.outcome === 'converged') {
            logger.info({ version: r.version, why }, 'rule files read again: another server applied them first');
          }
          if (r.outcome === 'same-files') logger.info({ why }, 'rule files read again: content as last followed');
        } else {
          await seedRuleStore(stores.ruleStore, settings.rules, logger);
        }
      } catch (err) {
        metrics.warning('rule_files_refused');
        logger.error({ err, files: settings.rules, why }, 'rule files not applied: the version in force stays');
      }
    });
    rereading = run;
    return run;
  };
  const stopFileWatch =
    settings.rulesMode === 'files' && settings.rules.length > 0
      ? watchRuleFiles(settings.rules, () => void rereadRuleFiles('a rule file changed'))
      : undefined;
  // Certificates rotate: new connections get the files as they are now; open ones keep theirs.
  const reloadTls = () => {
    if (tls === undefined) return;
    try {
      const next = readTls(settings)!;
      (app.server as unknown as TlsServer).setSecureContext(next);
      (grpcServer.http2 as unknown as TlsServer).setSecureContext(next);
      logger.info({ cert: settings.tlsCert }, 'SIGHUP: TLS certificate and key read again');
    } catch (err) {
      metrics.warning('tls_reload_failed');
      logger.error({ err }, 'SIGHUP: TLS files not read again: the certificate in force stays');
    }
  };
  const reload = async () => {
    reloadTls();
    logger.info('SIGHUP: reading the rule files again');
    await rereadRuleFiles('SIGHUP');
  };

  let closed: Promise<void> | undefined;
  const close = () => {
    closed ??= (async () => {
      closing = true;
      stopFileWatch?.();
      await rereading;
      logger.info({ graceMs: settings.shutdownGraceMs }, 'shutting down: finishing in-flight calls');
      grpcListener?.close();
      const drained = Promise.all([app.close(), shutdownGrpc(grpcServer, settings.shutdownGraceMs)]);
      let timer: NodeJS.Timeout | undefined;
      const graceOver = new Promise<'grace'>((r) => {
        timer = setTimeout(() => r('grace'), settings.shutdownGraceMs);
      });
      const first = await Promise.race([drained.then(() => 'drained' as const), graceOver]);
      clearTimeout(timer);
      // Waits still running past the grace period are ended: their callers get SLUICE_ERR_CLOSED.
      if (first === 'grace') logger.warn('grace period over: ending remaining waits');
      await limiter.close();
      // Answers to the ended waits are written first; connections still open a second later are cut.
      const cut = first === 'grace' ? setTimeout(() => app.server.closeAllConnections(), 1000) : undefined;
      await drained;
      clearTimeout(cut);
      latency.close();
      options.worker?.close();
      stopWatch?.();
      await adaptive.close();
      await clock.monitor?.close();
      await rollout?.close();
      await stores.close();
      // Last: the final export carries the shutdown's own figures.
      await otel?.close();
      warnings.close();
      logger.info('shut down');
    })();
    return closed;
  };
  return { url, httpPort, grpcPort, limiter, rules, metrics, logger, rollout, close, reload };
}

/** Follows the fleet's rollout when the rule store keeps one (both built-in stores do). */
function startRollouts(
  ruleStore: RuleStore,
  limiter: Limiter,
  rules: LiveRules,
  metrics: ServerMetrics,
  settings: Settings,
  logger: Logger,
  outcomes: OutcomeSource | undefined,
  /** Told when the rollout moves (a step, a pause, a promotion, an end). */
  moved: () => void,
): RolloutRunner | undefined {
  if (ruleStore.rolloutStore === undefined) return undefined;
  const figures = new RolloutMetrics(metrics);
  const runner: RolloutRunner = new RolloutRunner({
    store: ruleStore.rolloutStore(),
    ruleStore,
    limiter,
    rules,
    logger,
    ...(outcomes === undefined ? {} : { outcomes }),
    pollIntervalMs: settings.rolloutPollMs,
    leadershipTtlMs: settings.rolloutLeadershipMs,
    onChange: (state, rolledBack) => {
      const baseline = rules.version?.version ?? 0;
      const splitting = state !== undefined && (state.status === 'running' || state.status === 'paused');
      figures.cohorts(baseline, splitting ? state.baseline + 1 : undefined, runner.percent);
      if (rolledBack !== undefined) figures.rolledBack();
      moved();
    },
  });
  runner.start();
  return runner;
}

/** Whether `host` only accepts connections from this machine. */
function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}
