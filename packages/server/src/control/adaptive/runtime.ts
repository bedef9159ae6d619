import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { Degradation, secondsText, type LimiterObserver, type Logger, type OutcomeSource } from '@sluice/core';
import { openRedisClient } from '@sluice/redis/kit';
import { adaptiveLimitIndex, type RuleStore, type RuleVersion } from '@sluice/rules';
import type { ServerMetrics } from '../../metrics.js';
import { AdaptiveController, type AdaptiveStatus } from './controller.js';
import { MemoryDemandStore, type DemandStore } from './demand-store.js';
import { DemandRecorder } from './recorder.js';
import { RedisDemandStore } from './redis-demand-store.js';

/** Where the fleet's demand counts live: the server's Redis, or this process. */
export interface AdaptiveRedis {
  readonly url?: string;
  /** `host:port` seeds (checked by the settings). */
  readonly clusterNodes?: readonly string[];
  readonly prefix: string;
}

/** Options of {@link startAdaptive}. */
export interface AdaptiveRuntimeOptions {
  readonly ruleStore: RuleStore;
  /** The server's Redis; without it, counts and deciders are this process's (the embedded store). */
  readonly redis?: AdaptiveRedis;
  readonly metrics: ServerMetrics;
  readonly logger: Logger;
  /** Reported downstream outcomes, for the `aimd` policy. */
  readonly outcomes?: OutcomeSource;
  /** How often counts are added and rules judged, in ms. @default 1000 */
  readonly tickMs?: number;
  /** While true, no limit moves (see `AdaptiveControllerOptions.hold`). */
  readonly hold?: () => boolean;
}

/** The adaptive limits of one server: its recorder, its decider and what they hold. */
export interface AdaptiveRuntime {
  /** `observer` with the hooks that count decisions on adaptive resources added. */
  wrap(observer: LimiterObserver): LimiterObserver;
  /** Call with each version that becomes active. */
  applied(version: RuleVersion): void;
  status(): Promise<AdaptiveStatus[]>;
  close(): Promise<void>;
}

/** Starts counting and deciding adaptive limits for a server (see `AdaptiveController`). */
export function startAdaptive(options: AdaptiveRuntimeOptions): AdaptiveRuntime {
  const { metrics, logger } = options;
  let client: ReturnType<typeof openRedisClient> | undefined;
  let demand: DemandStore;
  if (options.redis !== undefined) {
    const { url, clusterNodes, prefix } = options.redis;
    client = openRedisClient({
      ...(url === undefined ? {} : { url }),
      ...(clusterNodes === undefined
        ? {}
        : {
            clusterNodes: clusterNodes.map((n) => ({
              host: n.slice(0, n.lastIndexOf(':')),
              port: Number(n.slice(n.lastIndexOf(':') + 1)),
            })),
          }),
      connectTimeoutMs: 1000,
      commandTimeoutMs: 1000,
      // A count held while Redis is away is sent late into the wrong interval: drop it instead.
      offlineQueue: false,
      resend: false,
      maxRetriesPerRequest: 0,
      onError: () => undefined,
    });
    demand = new RedisDemandStore(client, prefix);
  } else {
    demand = new MemoryDemandStore();
  }
  const tickMs = options.tickMs ?? 1000;
  // One line per failing spell, not per flush.
  const notRecorded = new Degradation({ logger, event: 'adaptive_demand_not_recorded' });
  const recorder = new DemandRecorder({
    store: demand,
    flushMs: tickMs,
    onError: (err) =>
      notRecorded.fail(err, (reason) => ({
        msg: `adaptive limits: demand counts not recorded (${reason}): limits are judged on the counts recorded until the store takes them`,
      })),
    onFlushed: () =>
      notRecorded.recover((spell) => ({
        msg: `adaptive limits: demand counts recorded again after ${secondsText(spell.lastedMs)} (${spell.repeats + 1} flushes dropped)`,
      })),
  });
  const controller = new AdaptiveController({
    ruleStore: options.ruleStore,
    demand,
    ...(options.outcomes === undefined ? {} : { outcomes: options.outcomes }),
    owner: `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`.slice(0, 128),
    tickMs,
    logger,
    onMove: (resource, move) => metrics.adaptiveMoved(resource, move.direction),
    ...(options.hold === undefined ? {} : { hold: options.hold }),
  });
  const counts = recorder.observer;
  return {
    wrap: (observer) => ({
      ...observer,
      decided: (e) => {
        observer.decided?.(e);
        counts.decided?.(e);
      },
      waited: (e) => {
        observer.waited?.(e);
        counts.waited?.(e);
      },
    }),
    applied(version) {
      recorder.track(version.ruleSet.adaptive);
      controller.update(version);
      const limits = new Map<string, number>();
      for (const rule of Object.values(version.ruleSet.adaptive)) {
        const ls = version.ruleSet.resources[rule.resource]?.limits ?? [];
        const l = ls[adaptiveLimitIndex(ls, rule.limit)];
        if (l !== undefined) limits.set(rule.resource, l.limit);
      }
      metrics.adaptiveLimits(limits);
    },
    status: () => controller.status(),
    async close() {
      await controller.close();
      await recorder.close();
      notRecorded.close();
      await demand.close();
      client?.disconnect();
    },
  };
}
