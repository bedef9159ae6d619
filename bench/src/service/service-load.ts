import { fork, type ChildProcess } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as protoLoader from '@grpc/proto-loader';
import { stopChild, trackChild } from './service-children.js';
import { mergeSamples } from './service-measure.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const WORKER = join(HERE, 'service-load-worker.js');
/** The Envoy protos `sluice serve` loads, read by the gRPC load clients too. */
export const PROTO_DIR = resolve(HERE, '../../../packages/server/proto');
const READY_TIMEOUT_MS = 15_000;

/** What one load process sends. */
export interface LoadConfig {
  /** `grpc`: @grpc/grpc-js; `grpc-h2`: gRPC framing over node:http2; `http`: undici. */
  readonly kind: 'grpc' | 'grpc-h2' | 'http';
  /** `host:port` (gRPC) or the HTTP origin. */
  readonly target: string;
  /** Calls each process keeps outstanding. */
  readonly inFlight: number;
  /** Distinct keys this process cycles through, from `keyOffset` on. */
  readonly keys: number;
  readonly keyOffset: number;
  /** Items per HTTP call (`{ items: [...] }`); 0: one item per call. */
  readonly batch: number;
  readonly resource: string;
  readonly domain: string;
  readonly descriptorKey: string;
  readonly protoDir: string;
}

/** What one load process measured in the measured window. */
export interface LoadResult {
  readonly calls: number;
  /** Calls answered over the whole run, warm-up included (every call started is awaited). */
  readonly completed: number;
  /** Calls with at least one denial. */
  readonly denied: number;
  readonly errors: number;
  readonly firstError: string | undefined;
  /** Latency of each call completed in the window, microseconds. */
  readonly latenciesUs: Float64Array;
  /** CPU time of the process in the window, microseconds. */
  readonly cpuUs: number;
  readonly measuredMs: number;
}

export type ToLoadWorker =
  | { readonly type: 'config'; readonly config: LoadConfig }
  | { readonly type: 'go'; readonly config: LoadConfig; readonly warmupMs: number; readonly measureMs: number };

type FromLoadWorker =
  | { readonly type: 'ready' }
  | { readonly type: 'result'; readonly result: LoadResult }
  | { readonly type: 'failed'; readonly error: string };

/** The merged figures of all load processes of a cell. */
export interface LoadTotals {
  readonly processes: number;
  readonly calls: number;
  readonly completed: number;
  readonly denied: number;
  readonly errors: number;
  readonly firstError: string | undefined;
  /** Every call's latency, ascending, microseconds. */
  readonly latenciesUs: Float64Array;
  /** CPU seconds of all load processes in the window. */
  readonly cpuSec: number;
  readonly seconds: number;
}

function nextMessage(child: ChildProcess, timeoutMs: number): Promise<FromLoadWorker> {
  return new Promise((resolvePromise, reject) => {
    const cleanup = () => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
    };
    const onMessage = (m: FromLoadWorker) => {
      cleanup();
      if (m.type === 'failed') reject(new Error(`load process failed: ${m.error}`));
      else resolvePromise(m);
    };
    const onExit = (code: number | null, signal: string | null) => {
      cleanup();
      reject(new Error(`load process exited (${code ?? signal}) before answering`));
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`load process did not answer within ${timeoutMs} ms`));
    }, timeoutMs);
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

/**
 * Runs `processes` load processes with `config` (each with its own slice of the keys), all
 * started together, and merges what they measured. `onGo` is called when they are told to start
 * (their warm-up begins). Every process is ended by its PID at the end, on failure too.
 */
export async function runLoadProcesses(
  processes: number,
  config: Omit<LoadConfig, 'keyOffset'>,
  warmupMs: number,
  measureMs: number,
  onGo: () => void,
): Promise<LoadTotals> {
  const children: ChildProcess[] = [];
  try {
    const configs = Array.from({ length: processes }, (_, i): LoadConfig => ({ ...config, keyOffset: i * config.keys }));
    for (let i = 0; i < processes; i++) {
      children.push(trackChild(fork(WORKER, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], serialization: 'advanced' })));
    }
    const ready = children.map((c) => nextMessage(c, READY_TIMEOUT_MS));
    children.forEach((c, i) => c.send({ type: 'config', config: configs[i]! } satisfies ToLoadWorker));
    await Promise.all(ready);
    const done = children.map((c) => nextMessage(c, warmupMs + measureMs + READY_TIMEOUT_MS));
    children.forEach((c, i) => c.send({ type: 'go', config: configs[i]!, warmupMs, measureMs } satisfies ToLoadWorker));
    onGo();
    const results = (await Promise.all(done)).map((m) => (m as { result: LoadResult }).result);
    return {
      processes,
      calls: results.reduce((n, r) => n + r.calls, 0),
      completed: results.reduce((n, r) => n + r.completed, 0),
      denied: results.reduce((n, r) => n + r.denied, 0),
      errors: results.reduce((n, r) => n + r.errors, 0),
      firstError: results.find((r) => r.firstError !== undefined)?.firstError,
      latenciesUs: mergeSamples(results.map((r) => r.latenciesUs)),
      cpuSec: results.reduce((n, r) => n + r.cpuUs, 0) / 1e6,
      seconds: Math.max(...results.map((r) => r.measuredMs)) / 1000,
    };
  } finally {
    await Promise.all(children.map((c) => stopChild(c, 1000)));
  }
}

/** `ShouldRateLimit` of Envoy's RLS API, loaded from the server's protos in `protoDir`. */
export function loadRlsMethod(protoDir: string): protoLoader.MethodDefinition<object, object> {
  const def = protoLoader.loadSync('envoy/service/ratelimit/v3/rls.proto', {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
    includeDirs: [protoDir],
  });
  return (def['envoy.service.ratelimit.v3.RateLimitService'] as protoLoader.ServiceDefinition).ShouldRateLimit!;
}
