import type { Decision, RateLimitHeaderForm } from '@sluice/core';
import type { DecisionTracing } from '@sluice/core/otel';
import { encodeDecision, encodeReserve } from '@sluice/core/wire';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { fromZod } from '../errors.js';
import { authorized, matchesAny, outcomeAccess, type OutcomeCredentials } from '../auth/auth.js';
import { checkOutcomeCalls, type ItemBounds } from '../bounds/bounds.js';
import type { RateLimitService } from '../service/service.js';
import { ITEM_COST, type FairTurns } from '../fair-turns.js';
import { CLIENT_HEARTBEAT_HEADER } from '../clients/client-ids.js';
import { decodeBody, itemSchemas, type Decoded } from './items.js';
import { errorReply, rateLimitHeaders, sendError, sendUnauthorized, type FaultLog } from './reply.js';

const flag = z.enum(['0', '1', 'true', 'false'], { error: 'must be 1 or 0' }).optional();
const decisionQuery = z.strictObject({ http429: flag, statuses: flag });
const isSet = (v: string | undefined) => v === '1' || v === 'true';

/** The header naming the active rule version on every API answer, so clients notice rule changes. */
export const RULES_VERSION_HEADER = 'sluice-rules-version';
/** The header remote clients identify themselves with (counted for fair shares). */
export const CLIENT_ID_HEADER = 'sluice-client-id';
const plainQuery = z.strictObject({});

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route's requests wait for their address's turn before they are parsed (see `FairTurns`). */
    turns?: boolean;
    /**
     * The route's requests may wait (for a permit) before they are answered: they are not
     * counted in flight for `FairTurns`' bound, which is for calls held at the store.
     */
    waits?: boolean;
  }
}

/** Whether a parsed query string has any parameter (fastify gives an object, possibly null-prototype). */
function hasKeys(query: unknown): boolean {
  if (query === undefined || query === null || typeof query !== 'object') return false;
  for (const _ in query) return true;
  return false;
}

/** An operation's result and how it is written. */
interface Op<T, R> {
  readonly path: string;
  readonly schema: z.ZodType<T>;
  readonly query: z.ZodType<Record<string, string | undefined>>;
  readonly run: (item: T, call: CallContext) => Promise<R>;
  readonly encode: (r: R, query: Record<string, string | undefined>, item: T) => object;
  /** Headers and status of a single call's answer. */
  readonly single?: (
    r: R,
    query: Record<string, string | undefined>,
    item: T,
  ) => { status: number; headers: Record<string, string> };
  /** Whether the operation may wait, and so must hear of the client going away. */
  readonly waits?: boolean;
  /** Whether the caller's `sluice-client-id` is counted among the clients sharing limits. @default true */
  readonly countsClient?: boolean;
  /** Who may call it, checked before the body is read. @default the data-plane token */
  readonly onRequest?: Hook | undefined;
  /** Checks the decoded items together (a batch's bounds); throws a ServerError to refuse them all. */
  readonly check?: (items: readonly (T | undefined)[]) => void;
  /** Whether a request makes a decision-batch span, named for the path's last part (with tracing on). */
  readonly traced?: boolean;
}

type Hook = (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => void;

/** The signal of operations that never wait: nothing listens for the client going away. */
const NEVER_ABORTED = new AbortController().signal;
/** The parsed query of a request without one (the common case: no parse). */
const NO_QUERY: Record<string, string | undefined> = Object.freeze({});

/** What an item's operation knows of its request. */
interface CallContext {
  /** Aborts when the client goes away. */
  readonly signal: AbortSignal;
  /** Who calls: the remote address (the client id header is the client's own claim, so not this). */
  readonly client: string;
}

/** A decoded item's value, or undefined when it was refused. */
const valueOf = <T>(d: Decoded<T>): T | undefined => (d.ok ? d.value : undefined);

/** A single decision's answer: 429 when asked (`?http429`), and the rate-limit header fields of `form`. */
function decisionSingle(form: RateLimitHeaderForm, service: RateLimitService) {
  return (d: Decision, query: Record<string, string | undefined>, item: { readonly resource: string; readonly key?: string }) => {
    const http429 = isSet(query.http429);
    const headers = rateLimitHeaders(d, item.resource, form, service.windowSecondsOf(item, d.limitId));
    return { status: !d.allowed && http429 ? 429 : 200, headers };
  };
}

/** Who may call the API: the data-plane token, and who may report outcomes and how much. */
export interface ApiAccess extends OutcomeCredentials {
  /** Most calls one outcome report may stand for (`--max-outcome-calls`). */
  readonly maxOutcomeCalls: number;
}

/**
 * `POST /v1/check|acquire|release|adjust|reserve|renew|book|claim|cancel|outcomes`: decode -> service -> encode. A body is one item (answered with its status and RateLimit headers) or
 * `{ items: [...] }` (answered 200 with `{ results: [...] }`, one decision or `{ error }` per
 * item, in order). With `apiToken` set, each decision call needs it as a bearer token, checked
 * before the body is read; outcome reports need the credential {@link outcomeAccess} names.
 * `GET /v1/resources` stays public, the rollout's id in it only for data-plane callers, and so
 * does `GET /v1/time`.
 */
export function registerApi(
  app: FastifyInstance,
  service: RateLimitService,
  bounds: ItemBounds,
  logger: FaultLog,
  access: ApiAccess,
  turns: FairTurns,
  headerForm: RateLimitHeaderForm,
  tracing?: DecisionTracing,
): void {
  const single = decisionSingle(headerForm, service);
  const token = access.apiToken;
  const schemas = itemSchemas(bounds);
  // An answer sent from a hook ends the request; fastify is told nothing more.
  const refuse = (reply: FastifyReply, message: string) => void sendUnauthorized(reply, message, logger);
  // Without a token there is nothing to check: no hook at all (each one costs every request).
  const onRequest: Hook | undefined =
    token === undefined
      ? undefined
      : (request, reply, done) => {
          if (authorized(request.headers.authorization, token)) done();
          else refuse(reply, 'a valid bearer token is required');
        };
  const reporters = outcomeAccess(access);
  const onOutcomes: Hook = (request, reply, done) => {
    if (reporters.allows(request.headers.authorization)) done();
    else refuse(reply, reporters.refusal);
  };
  // Who is a data-plane client: with a data-plane token, its holders (and the other tokens' holders).
  const tokens = [access.apiToken, access.outcomesToken, access.adminToken].filter((t): t is string => t !== undefined);
  const dataPlane = (header: unknown) => token === undefined || matchesAny(header, tokens);
  const route = <T, R>(op: Op<T, R>) => {
    const hook = 'onRequest' in op ? op.onRequest : onRequest;
    // Parsed and decided in the address's turn, the calls of one turn together (see FairTurns).
    const config = { turns: true, waits: op.waits === true };
    const options = hook === undefined ? { config } : { onRequest: hook, config };
    // With tracing on, a request's decisions are made in one span (the items' count, resources,
    // outcomes and sources on it), a child of the caller's when its headers carry a traceparent.
    const traced = op.traced === true ? tracing : undefined;
    const span = {
      operation: op.path.slice('/v1/'.length),
      attributes: { 'http.request.method': 'POST', 'http.route': op.path },
    };
    app.post(op.path, options, async (request: FastifyRequest, reply: FastifyReply) => {
      void reply.header(RULES_VERSION_HEADER, String(service.rulesVersion));
      const q = hasKeys(request.query) ? op.query.safeParse(request.query) : { success: true as const, data: NO_QUERY };
      if (!q.success) return sendError(reply, fromZod(q.error), logger);
      let body;
      try {
        body = decodeBody(request.body, op.schema, bounds.maxBatch);
        op.check?.(body.batch ? body.items.map(valueOf) : [valueOf(body.item)]);
      } catch (err) {
        return sendError(reply, err, logger);
      }
      turns.charge(request.ip, (body.batch ? body.items.length : 1) * ITEM_COST);
      // Clients are counted from the calls that use limits (authenticated, when a token is set):
      // the count divides every remote client's fallback share, so no public call may move it.
      if (op.countsClient !== false)
        service.clients.note(request.headers[CLIENT_ID_HEADER], request.headers[CLIENT_HEARTBEAT_HEADER]);
      // Waits end when the client goes away: the response closes before it was written. Every
      // item of a batch shares this one signal (the limiter listens to it once).
      let signal = NEVER_ABORTED;
      if (op.waits === true) {
        const abort = new AbortController();
        reply.raw.once('close', () => {
          if (!reply.raw.writableFinished) abort.abort();
        });
        signal = abort.signal;
      }
      const context: CallContext = { signal, client: request.ip };
      const answer = async (d: Decoded<T>) => {
        if (!d.ok) throw d.error;
        return op.run(d.value, context);
      };
      if (!body.batch) {
        const item = body.item;
        let r: R;
        try {
          r =
            traced === undefined
              ? await answer(item)
              : await traced.batch({ ...span, items: 1, headers: request.headers }, () => answer(item));
        } catch (err) {
          return sendError(reply, err, logger);
        }
        // Answered, so the item was decoded.
        const single = (item.ok ? op.single?.(r, q.data, item.value) : undefined) ?? { status: 200, headers: {} };
        return reply
          .code(single.status)
          .headers(single.headers)
          .send(op.encode(r, q.data, (item as { value: T }).value));
      }
      const items = body.items;
      const settled =
        traced === undefined
          ? await Promise.allSettled(items.map(answer))
          : await traced.batch({ ...span, items: items.length, headers: request.headers }, () =>
              Promise.allSettled(items.map(answer)),
            );
      // A fulfilled item was decoded.
      const results = settled.map((s, i) =>
        s.status === 'fulfilled'
          ? op.encode(s.value, q.data, (items[i] as { value: T }).value)
          : errorReply(s.reason, logger).body,
      );
      return reply.code(200).send({ results });
    });
  };
  route({
    path: '/v1/check',
    traced: true,
    schema: schemas.check,
    query: decisionQuery,
    run: (item, call) => service.check(item, call.client),
    encode: (d, q, item) => encodeDecision(d, isSet(q.statuses), service.cohortOf(item)),
    single,
  });
  route({
    path: '/v1/acquire',
    traced: true,
    schema: schemas.acquire,
    query: decisionQuery,
    run: (item, call) => service.acquire(item, call.signal, call.client),
    encode: (d, q, item) => encodeDecision(d, isSet(q.statuses), service.cohortOf(item)),
    single,
    waits: true,
  });
  route({
    path: '/v1/release',
    schema: schemas.release,
    query: plainQuery,
    run: (item) => service.release(item),
    encode: (r) => r,
  });
  route({ path: '/v1/adjust', schema: schemas.adjust, query: plainQuery, run: (item) => service.adjust(item), encode: (r) => r });
  route({
    path: '/v1/reserve',
    schema: schemas.reserve,
    query: plainQuery,
    run: (item) => service.reserve(item),
    encode: encodeReserve,
  });
  route({ path: '/v1/renew', schema: schemas.renew, query: plainQuery, run: (item) => service.renew(item), encode: (r) => r });
  // Deferred admission: decisions as /v1/check's, with their `booking` (and `Sluice-Booking` when booked).
  route({
    path: '/v1/book',
    traced: true,
    schema: schemas.book,
    query: decisionQuery,
    run: (item, call) => service.book(item, call.client),
    encode: (d, q, item) => encodeDecision(d, isSet(q.statuses), service.cohortOf(item)),
    single,
  });
  route({
    path: '/v1/claim',
    traced: true,
    schema: schemas.book,
    query: decisionQuery,
    run: (item, call) => service.claim(item, call.client),
    encode: (d, q, item) => encodeDecision(d, isSet(q.statuses), service.cohortOf(item)),
    single,
  });
  route({
    path: '/v1/cancel',
    schema: schemas.cancel,
    query: plainQuery,
    run: (item, call) => service.cancel(item, call.client),
    encode: (r) => r,
  });
  // Outcomes of calls to downstreams, for breakers and tallies (a batch answers per item).
  // They steer fleet breakers, rollouts and adaptive limits: a credential of their own, and a
  // bound on the calls one report stands for.
  route({
    path: '/v1/outcomes',
    schema: schemas.outcome,
    query: plainQuery,
    run: (item) => service.outcome(item),
    encode: (r) => r,
    countsClient: false,
    onRequest: onOutcomes,
    check: (items) => checkOutcomeCalls(items, access.maxOutcomeCalls),
  });
  // A remote client closing: it stops counting among the live clients at once (the others'
  // fallback shares grow back), rather than after its missed heartbeats.
  app.post('/v1/goodbye', onRequest === undefined ? {} : { onRequest }, async (request, reply) => {
    return reply.send({ counted: service.clients.goodbye(request.headers[CLIENT_ID_HEADER]) });
  });
  // Public and read-only, as /v1/stats (the dashboard reads both): names and limits only, no
  // secrets; bounded by MAX_LISTED_RESOURCES.
  app.get('/v1/resources', async (request, reply) => {
    const q = plainQuery.safeParse(request.query ?? {});
    if (!q.success) return sendError(reply, fromZod(q.error), logger);
    // A remote client's rule poll is its heartbeat: counted as a live client while it polls.
    // Only a data-plane caller's that names its heartbeat: this route is public, and the
    // dashboard and scripts that read it are not clients sharing limits.
    if (request.headers[CLIENT_HEARTBEAT_HEADER] !== undefined && dataPlane(request.headers.authorization)) {
      service.clients.note(request.headers[CLIENT_ID_HEADER], request.headers[CLIENT_HEARTBEAT_HEADER]);
    }
    const view = service.resources();
    // The rollout's id salts the hash that sorts keys into cohorts: whoever has it can aim
    // reports at one cohort. Data-plane clients need it (their fallback splits keys as the
    // service does); outsiders get the share only.
    if (view.rollout !== undefined && !dataPlane(request.headers.authorization)) {
      const { id: _id, ...rollout } = view.rollout;
      return reply.header(RULES_VERSION_HEADER, String(view.version)).send({ ...view, rollout });
    }
    return reply.header(RULES_VERSION_HEADER, String(view.version)).send(view);
  });
  // The store's clock as this server reads it, for remote clients measuring their own skew
  // against the store without a Redis connection of their own. Public and read-only, as
  // /v1/stats; 503 `SLUICE_ERR_NOT_READY` while Redis' clock was never read.
  app.get('/v1/time', async (_request, reply) => {
    let time;
    try {
      time = service.time();
    } catch (err) {
      return sendError(reply, err, logger);
    }
    return reply.send(time);
  });
}
