/**
 * Spans of a limiter's work: one per decision batch (what one request asked for, its decisions
 * tallied into it) and one per store call that left the process, a child of the batch it served.
 * The link between them is OpenTelemetry's active context, which follows the limiter's awaits.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  context,
  trace,
  type Attributes,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { LimiterObserver } from '../shared/observer.js';
import type { StoreCall } from '../store/store.js';

/** One decision batch: the items one request asked to decide. */
export interface DecisionBatch {
  /** What was asked (`check`, `acquire`, `book`, `claim`, `ShouldRateLimit`): the span's name after `sluice `. */
  readonly operation: string;
  /** How many items the request carried. */
  readonly items: number;
  /**
   * The caller's request headers: a W3C `traceparent` (and `tracestate`) in them makes the batch
   * a child of the caller's span. Without them the batch is a child of the active span, if any.
   */
  readonly headers?: Readonly<Record<string, string | string[] | undefined>>;
  /** More attributes, e.g. the transport's semantic conventions (`http.route`, `rpc.method`). */
  readonly attributes?: Attributes;
}

/** Spans around decision batches (see {@link createTracing}). */
export interface DecisionTracing {
  /**
   * Runs `decide` in a span of the batch (kind `SERVER` when `headers` are given, else
   * `INTERNAL`). Decisions made within it are tallied into its attributes; a `decide` that
   * throws ends it with status `ERROR` and `error.type`.
   */
  batch<T>(batch: DecisionBatch, decide: () => Promise<T>): Promise<T>;
}

/** The store a tracing observer describes in its store-call spans. */
export interface TracedStore {
  /** `db.system.name` (and the older `db.system`), e.g. `redis`. */
  readonly system?: string;
  /** `host:port` (then `server.address` and `server.port`), or a list of seed nodes (`sluice.store.address`). */
  readonly address?: string;
}

/** Options of {@link createTracing}. */
export interface TracingOptions {
  readonly tracer: Tracer;
  readonly store?: TracedStore;
  /**
   * Trace store calls made outside any span too (health probes while the store is away,
   * background outcome reports). @default false: only calls made for a traced caller
   */
  readonly rootStoreCalls?: boolean;
  /** The clock of span ends (ms since the epoch, fractions kept). @default performance's */
  readonly now?: () => number;
}

/** Most distinct resources and sources named on one batch span. */
export const MAX_NAMED_PER_BATCH = 16;

interface Tally {
  allowed: number;
  denied: number;
  readonly resources: Set<string>;
  readonly sources: Set<string>;
}

const headerGetter = {
  keys: (carrier: Readonly<Record<string, string | string[] | undefined>>) => Object.keys(carrier),
  get: (carrier: Readonly<Record<string, string | string[] | undefined>>, key: string) => carrier[key],
};

/** `error.type`: the error's stable code when it has one, else its class name. */
export function errorType(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code !== '') return code;
    const name = (error as { name?: unknown }).name;
    if (typeof name === 'string' && name !== '') return name;
  }
  return '_OTHER';
}

/** A span status's message: the error's own, else its type. */
function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : typeof error === 'string' ? error : errorType(error);
}

/** The address attributes of a store: `server.address`/`server.port` for one `host:port`. */
function storeAttributes(store: TracedStore | undefined): Attributes {
  const attributes: Attributes = {};
  if (store?.system !== undefined) {
    attributes['db.system.name'] = store.system;
    attributes['db.system'] = store.system;
  }
  const address = store?.address;
  if (address === undefined) return attributes;
  const one = /^(\[[^\]]+\]|[^,:\s]+):(\d+)$/.exec(address);
  if (one === null) {
    attributes['sluice.store.address'] = address;
  } else {
    attributes['server.address'] = one[1]!.replace(/^\[|\]$/g, '');
    attributes['server.port'] = Number(one[2]);
  }
  return attributes;
}

/**
 * Decision-batch spans ({@link DecisionTracing}) and the observer that feeds them: `decided`
 * tallies each decision into the batch span active at the time, `storeCalled` records each
 * store call as a `CLIENT` span (`sluice.store <operation>`), timed from its call to its answer.
 * Join the observer with the limiter's others (see `joinObservers`). Both rely on a context
 * manager being registered (`startOtel` registers Node's `AsyncLocalStorage` one).
 */
export function createTracing(options: TracingOptions): { tracing: DecisionTracing; observer: LimiterObserver } {
  const { tracer } = options;
  const now = options.now ?? (() => performance.timeOrigin + performance.now());
  const tallies = new WeakMap<Span, Tally>();
  const propagator = new W3CTraceContextPropagator();
  const store = storeAttributes(options.store);
  const rootStoreCalls = options.rootStoreCalls === true;

  const tracing: DecisionTracing = {
    async batch(batch, decide) {
      const parent =
        batch.headers === undefined ? context.active() : propagator.extract(ROOT_CONTEXT, batch.headers, headerGetter);
      const span = tracer.startSpan(
        `sluice ${batch.operation}`,
        {
          kind: batch.headers === undefined ? SpanKind.INTERNAL : SpanKind.SERVER,
          attributes: { ...batch.attributes, 'sluice.operation': batch.operation, 'sluice.items': batch.items },
        },
        parent,
      );
      const active = trace.setSpan(parent, span);
      if (!span.isRecording()) return context.with(active, decide);
      const tally: Tally = { allowed: 0, denied: 0, resources: new Set(), sources: new Set() };
      tallies.set(span, tally);
      try {
        return await context.with(active, decide);
      } catch (err) {
        span.setAttribute('error.type', errorType(err));
        span.setStatus({ code: SpanStatusCode.ERROR, message: messageOf(err) });
        throw err;
      } finally {
        span.setAttributes({
          'sluice.allowed': tally.allowed,
          'sluice.denied': tally.denied,
          'sluice.resources': [...tally.resources].sort(),
          'sluice.decision.sources': [...tally.sources].sort(),
        });
        span.end();
      }
    },
  };

  const observer: LimiterObserver = {
    decided({ resource, decision }) {
      const span = trace.getSpan(context.active());
      if (span === undefined) return;
      const tally = tallies.get(span);
      if (tally === undefined) return;
      if (decision.allowed) tally.allowed++;
      else tally.denied++;
      if (tally.resources.size < MAX_NAMED_PER_BATCH) tally.resources.add(resource);
      if (tally.sources.size < MAX_NAMED_PER_BATCH) tally.sources.add(decision.source ?? 'store');
    },
    storeCalled(call: StoreCall) {
      const parent = context.active();
      const parentSpan = trace.getSpan(parent);
      // A call for a request that is not sampled is not either; one for no request only if asked.
      if (parentSpan === undefined ? !rootStoreCalls : !parentSpan.isRecording()) return;
      const end = now();
      const span = tracer.startSpan(
        `sluice.store ${call.operation}`,
        {
          kind: SpanKind.CLIENT,
          startTime: end - call.durationMs,
          attributes: {
            ...store,
            'db.operation.name': call.operation,
            'sluice.store.operation': call.operation,
            'sluice.store.outcome': call.error === undefined ? 'ok' : 'error',
          },
        },
        parent,
      );
      if (call.error !== undefined) {
        span.setAttribute('error.type', errorType(call.error));
        span.setStatus({ code: SpanStatusCode.ERROR, message: messageOf(call.error) });
      }
      span.end(end);
    },
  };
  return { tracing, observer };
}

/**
 * One observer calling each of `observers` in turn, for every hook any of them has (a hook none
 * has stays absent, so the limiter does not pay for it).
 */
export function joinObservers(...observers: readonly (LimiterObserver | undefined)[]): LimiterObserver {
  type Hook = (event: unknown) => void;
  const present = observers.filter((o): o is LimiterObserver => o !== undefined) as unknown as Record<string, unknown>[];
  const joined: Record<string, Hook> = {};
  for (const hook of new Set(present.flatMap((o) => Object.keys(o)))) {
    // Each hook called on its own observer, as the limiter would call it.
    const calls = present.flatMap((o) => {
      const f = o[hook];
      return typeof f === 'function' ? [(event: unknown) => (f as Hook).call(o, event)] : [];
    });
    joined[hook] =
      calls.length === 1
        ? calls[0]!
        : (event) => {
            for (const call of calls) call(event);
          };
  }
  return joined;
}
