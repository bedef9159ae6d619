/**
 * OpenTelemetry for `sluice serve`, driven by the standard variables (`OTEL_*`, see
 * docs/observing.md): off unless an exporter or an OTLP endpoint is set, and then the SDK is
 * loaded, the registry of `/metrics` exported over OTLP and decision batches traced. Off, not
 * one OpenTelemetry module is loaded.
 */
import type { LimiterObserver } from '@sluice/core';
import type { DecisionTracing } from '@sluice/core/otel';
import { OtelEnvError, describeOtelEnv, readOtelEnv, type OtelEnv } from '@sluice/core/otel/env';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { WarningThrottle } from './logging.js';
import { SettingsError } from './settings.js';

/** The service name when the variables give none. */
export const OTEL_SERVICE_NAME = 'sluice';

/**
 * What the variables ask for, undefined when off.
 *
 * @throws SettingsError naming the variable whose value is not understood
 */
export function readServerOtel(env: Readonly<Record<string, string | undefined>>): OtelEnv | undefined {
  try {
    return readOtelEnv(env, { serviceName: OTEL_SERVICE_NAME });
  } catch (err) {
    if (err instanceof OtelEnvError) throw new SettingsError(err.message);
    throw err;
  }
}

/** OpenTelemetry as the server runs it. */
export interface ServerOtel {
  /** `base` with the span hooks joined (`base` itself when traces are off). */
  observer(base: LimiterObserver): LimiterObserver;
  /** Decision-batch spans; undefined when traces are off. */
  readonly tracing: DecisionTracing | undefined;
  /** Exports what is pending and stops (within 5 s). */
  close(): Promise<void>;
}

/** Where the server's parts for OpenTelemetry come from. */
export interface ServerOtelParts {
  readonly registry: Registry;
  /** The store's `host:port` (or seed nodes) when it is Redis. */
  readonly storeAddress: string | undefined;
  readonly logger: Logger;
  /** Export failures are logged through it (a line per interval at most) and counted. */
  readonly warnings: WarningThrottle;
}

/** Loads the SDK and starts what `otel` asks for; logs one line saying what is exported where. */
export async function startServerOtel(otel: OtelEnv, parts: ServerOtelParts): Promise<ServerOtel> {
  const { startOtel, joinObservers } = await import('@sluice/core/otel');
  const running = startOtel(otel, {
    registry: parts.registry,
    ...(parts.storeAddress === undefined ? {} : { store: { system: 'redis', address: parts.storeAddress } }),
    onExportFailed: (signal, error) =>
      parts.warnings.warn(
        `otel_${signal}_export_failed`,
        { err: error?.message ?? 'unknown' },
        `OTLP export of ${signal} failed: its data is dropped, decisions go on`,
      ),
  });
  parts.logger.info(describeOtelEnv(otel), 'OpenTelemetry export on');
  const spans = running.observer;
  return {
    observer: (base) => (spans === undefined ? base : joinObservers(base, spans)),
    tracing: running.tracing,
    close: () => running.close(),
  };
}
