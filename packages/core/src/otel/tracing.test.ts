import { SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
  type Sampler,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Limiter } from '../admission/limiter.js';
import { ManualClock } from '../shared/clock.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import type { LimiterObserver } from '../shared/observer.js';
import { MemoryStore } from '../store/memory-store.js';
import type { LimitStore } from '../store/store.js';
import { createTracing, joinObservers } from './tracing.js';

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const CALLER_SPAN = 'b7ad6b7169203331';

let manager: AsyncLocalStorageContextManager;
beforeAll(() => {
  manager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(manager);
});
afterAll(() => {
  context.disable();
});

/**
 * A store that answers from memory but is not the in-memory store (whose calls make no round
 * trip and are not reported): its calls are timed and reported as a remote store's are.
 * `down.now` makes every call fail as an unreachable store's would.
 */
function remoteLike(clock: ManualClock) {
  const inner = new MemoryStore({ clock });
  const down = { now: false };
  const store = new Proxy(inner, {
    getPrototypeOf: () => Object.prototype,
    get(target, key) {
      const v = Reflect.get(target, key, target) as unknown;
      if (key === 'address') return '10.0.0.5:6379';
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        if (down.now && key === 'consume')
          return Promise.reject(new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'connection refused'));
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  }) as unknown as LimitStore;
  return { store, down };
}

function setUp(sampler: Sampler = new AlwaysOnSampler()) {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ sampler, spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const { tracing, observer } = createTracing({
    tracer: provider.getTracer('test'),
    store: { system: 'redis', address: '10.0.0.5:6379' },
  });
  const clock = new ManualClock();
  const { store, down } = remoteLike(clock);
  const limiter = new Limiter({
    resources: { api: { limits: { algorithm: 'fixed-window', limit: 2, windowMs: 60_000 }, onStoreFailure: 'open' } },
    store,
    clock,
    observer,
  });
  const spans = () => exporter.getFinishedSpans();
  const named = (prefix: string) => spans().filter((s) => s.name.startsWith(prefix));
  return { tracing, observer, limiter, down, spans, named, close: () => limiter.close() };
}

const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

describe('decision-batch and store-call spans', () => {
  it('a batch span, a child of the caller’s traceparent, tallies its decisions; each store call is its child', async () => {
    const t = setUp();
    const headers = { traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-01` };
    const decisions = await t.tracing.batch(
      { operation: 'check', items: 3, headers, attributes: { 'http.route': '/v1/check' } },
      () =>
        Promise.all([t.limiter.try('api', { key: 'k' }), t.limiter.try('api', { key: 'k' }), t.limiter.try('api', { key: 'k' })]),
    );
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, false]);
    const [batch] = t.named('sluice check');
    expect(batch).toBeDefined();
    expect(batch!.kind).toBe(SpanKind.SERVER);
    expect(batch!.spanContext().traceId).toBe(TRACE_ID);
    expect(parentOf(batch!)).toBe(CALLER_SPAN);
    expect(batch!.attributes).toEqual({
      'http.route': '/v1/check',
      'sluice.operation': 'check',
      'sluice.items': 3,
      'sluice.allowed': 2,
      'sluice.denied': 1,
      'sluice.resources': ['api'],
      'sluice.decision.sources': ['store'],
    });
    const calls = t.named('sluice.store ');
    expect(calls).toHaveLength(3);
    for (const call of calls) {
      expect(call.name).toBe('sluice.store consume');
      expect(call.kind).toBe(SpanKind.CLIENT);
      expect(parentOf(call)).toBe(batch!.spanContext().spanId);
      expect(call.attributes).toMatchObject({
        'db.system.name': 'redis',
        'db.system': 'redis',
        'server.address': '10.0.0.5',
        'server.port': 6379,
        'db.operation.name': 'consume',
        'sluice.store.outcome': 'ok',
      });
      expect(call.status.code).toBe(SpanStatusCode.UNSET);
    }
    await t.close();
  });

  it('a failed store call is an ERROR span with error.type; the batch names the fallback that decided', async () => {
    const t = setUp();
    t.down.now = true;
    const d = await t.tracing.batch({ operation: 'check', items: 1 }, () => t.limiter.try('api', { key: 'k' }));
    expect(d.source).toBe('fallback');
    const [batch] = t.named('sluice check');
    expect(batch!.kind).toBe(SpanKind.INTERNAL);
    expect(batch!.attributes['sluice.decision.sources']).toEqual(['fallback']);
    const failed = t.named('sluice.store consume').find((s) => s.status.code === SpanStatusCode.ERROR);
    expect(failed?.attributes).toMatchObject({ 'error.type': ErrorCodes.STORE_UNAVAILABLE, 'sluice.store.outcome': 'error' });
    expect(failed?.status.message).toBe('connection refused');
    await t.close();
  });

  it('a batch that throws ends as an ERROR span with the error’s code', async () => {
    const t = setUp();
    await expect(t.tracing.batch({ operation: 'check', items: 1 }, () => t.limiter.try('nope', { key: 'k' }))).rejects.toThrow(
      SluiceError,
    );
    const [batch] = t.named('sluice check');
    expect(batch!.status.code).toBe(SpanStatusCode.ERROR);
    expect(batch!.attributes['error.type']).toBe(ErrorCodes.UNKNOWN_RESOURCE);
    await t.close();
  });

  it('a request that is not sampled makes no span, nor do its store calls, whatever the sampler would say of them', async () => {
    const t = setUp(new AlwaysOffSampler());
    expect((await t.tracing.batch({ operation: 'check', items: 1 }, () => t.limiter.try('api', { key: 'k' }))).allowed).toBe(
      true,
    );
    expect(t.spans()).toEqual([]);
    await t.close();
    // Under a caller's span that is not sampled, with a sampler that would take any new span.
    const u = setUp(new AlwaysOnSampler());
    const unsampled = trace.wrapSpanContext({ traceId: TRACE_ID, spanId: CALLER_SPAN, traceFlags: 0 });
    await context.with(trace.setSpan(context.active(), unsampled), () => u.limiter.try('api', { key: 'k' }));
    expect(u.spans()).toEqual([]);
    await u.close();
  });

  it('store calls outside any span make none; inside an application span they are its children', async () => {
    const t = setUp();
    await t.limiter.try('api', { key: 'k' });
    expect(t.spans()).toEqual([]);
    const tracer = new BasicTracerProvider().getTracer('app');
    const outer = tracer.startSpan('app work');
    await context.with(trace.setSpan(context.active(), outer), () => t.limiter.try('api', { key: 'k' }));
    outer.end();
    expect(t.spans().map((s) => [s.name, parentOf(s)])).toEqual([['sluice.store consume', outer.spanContext().spanId]]);
    await t.close();
  });
});

describe('joinObservers', () => {
  it('calls every observer’s hook on its own observer, and leaves out hooks none has', () => {
    const seen: string[] = [];
    class Counting implements LimiterObserver {
      constructor(readonly name: string) {}
      storeSwitched() {
        seen.push(`${this.name} switched`);
      }
    }
    const a = new Counting('a');
    const joined = joinObservers(a, undefined, {
      storeSwitched: () => seen.push('b switched'),
      waited: () => seen.push('b waited'),
    });
    joined.storeSwitched?.({ healthy: false });
    joined.waited?.({ resource: 'r', waitedMs: 1, outcome: 'granted' });
    expect(seen).toEqual(['a switched', 'b switched', 'b waited']);
    expect('decided' in joined).toBe(false);
  });
});
