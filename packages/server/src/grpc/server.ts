import { createServer as createNetServer, type Server as NetServer } from 'node:net';
import { once } from 'node:events';
import {
  constants as h2constants,
  createServer as createH2Server,
  createSecureServer as createH2SecureServer,
  type Http2SecureServer,
  type Http2Server,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
  type ServerHttp2Stream,
} from 'node:http2';
import type { DecisionTracing } from '@sluice/core/otel';
import { authorized, type OutcomeAccess } from '../auth/auth.js';
import type { OutcomesBounds, RlsBounds } from '../bounds/bounds.js';
import { limitConnections, type ConnectionEvents, type ConnectionLimits } from '../clients/connections.js';
import { GrpcStatus, ServerError, ServerErrorCodes, describeError, grpcStatusOf } from '../errors.js';
import { GRPC_CALL_COST, ITEM_COST, finishOnClose, requestCost, type FairTurns } from '../fair-turns.js';
import type { ServerMetrics } from '../metrics.js';
import type { WarningThrottle } from '../logging.js';
import type { RateLimitService } from '../service/service.js';
import type { TlsMaterial } from '../tls.js';
import { decodeRlsRequest } from './codec.js';
import { GRPC_CONTENT_TYPE, UnaryReader, frameMessage, parseGrpcTimeout, trailersOnly } from './framing.js';
import { Sessions } from './sessions.js';
import { decodeOutcomes, encodeOutcomeResults } from './outcomes.js';
import { OUTCOMES_PATH, RLQS_PATH, RLS_PATH } from './proto.js';
import { RlqsStreams, type GrpcQuota } from './rlqs.js';
import { writeRateLimitResponse } from './wire.js';

/** What the gRPC server is built from. */
export interface GrpcDeps {
  /** Serve gRPC over TLS with this key pair (and client CA, for mutual TLS). @default plaintext */
  readonly tls?: TlsMaterial;
  /** What every call is decided by: `shouldRateLimit` and `outcome`. */
  readonly service: Pick<RateLimitService, 'shouldRateLimit' | 'outcome'>;
  readonly metrics: ServerMetrics;
  /** Internal faults are logged through it (a client can repeat the calls causing them). */
  readonly warnings: WarningThrottle;
  readonly bounds: RlsBounds;
  /** Serves `sluice.v1.Outcomes/Report`; none: UNIMPLEMENTED. */
  readonly outcomes?: GrpcOutcomes;
  /** Serves Envoy's `RateLimitQuotaService/StreamRateLimitQuotas` (with `token`, as `ShouldRateLimit`); none: UNIMPLEMENTED. */
  readonly quota?: GrpcQuota;
  readonly maxMessageBytes: number;
  /** How long a connection may stay open with no call in progress. */
  readonly idleTimeoutMs: number;
  /** How long calls in progress may finish once a connection reached its age (see {@link MAX_CONNECTION_AGE_MS}). */
  readonly bodyTimeoutMs: number;
  /** True once the server is shutting down: new calls are refused. */
  readonly closing: () => boolean;
  /** Most calls in progress over all connections of one remote address (see `Sessions`). @default 1000 */
  readonly maxClientStreams?: number;
  /** How long an answer may wait for the peer to take it before its connection is cut. @default 5000 */
  readonly writeTimeoutMs?: number;
  /** Where calls wait for their turn, shared with the HTTP listener so that an address's work on both counts as one. */
  readonly turns: FairTurns;
  /** The bearer token every call must carry in its `authorization` metadata; none: calls are open. */
  readonly token?: string | undefined;
  /** A span per `ShouldRateLimit` call, a child of the caller's when its metadata carries a traceparent. @default none */
  readonly tracing?: DecisionTracing;
}

/** How `Outcomes/Report` is served (each outcome goes to the service's `outcome`): who may call it, and its bounds. */
export interface GrpcOutcomes {
  /** Who may report (its own credential: `token` does not apply). */
  readonly access: OutcomeAccess;
  readonly bounds: OutcomesBounds;
}

const METHOD = 'ShouldRateLimit';
const OUTCOMES_METHOD = 'Report';
const RLQS_METHOD = 'StreamRateLimitQuotas';

/**
 * Most concurrent calls on one connection: each may buffer up to `maxMessageBytes`, so this
 * bounds a connection's memory. Envoy keeps far fewer calls in flight per connection.
 */
export const MAX_CONCURRENT_STREAMS = 100;
/**
 * Every connection is asked to go away (GOAWAY) at this age; calls in progress then have the
 * body timeout to finish. This bounds how long a call whose message never completes holds its
 * connection. Clients reconnect at once.
 */
export const MAX_CONNECTION_AGE_MS = 120_000;
/** Pings find peers that vanished without closing (their connections would count against the caps). */
const KEEPALIVE_MS = 60_000;
const KEEPALIVE_TIMEOUT_MS = 20_000;

/** The gRPC server: an HTTP/2 server fed the connections of {@link bindGrpc}, and its connections. */
export interface GrpcServer {
  /** Plaintext HTTP/2, or HTTP/2 over TLS (ALPN `h2`) when the deps give `tls`. */
  readonly http2: Http2Server | Http2SecureServer;
  readonly sessions: Sessions;
  /** The open quota streams (when the deps give `quota`). */
  readonly rlqs: RlqsStreams | undefined;
  /** Where the calls wait for their address's turn (each connection accepted is charged there too). */
  readonly turns: FairTurns;
}

/** Whether a content-type names gRPC (`application/grpc`, `application/grpc+proto`, `application/grpc;...`). */
function isGrpcContentType(value: string | undefined): boolean {
  if (value === undefined || !value.startsWith('application/grpc')) return false;
  const next = value.charCodeAt('application/grpc'.length);
  return Number.isNaN(next) || next === 0x2b /* + */ || next === 0x3b; /* ; */
}

/**
 * A gRPC server offering Envoy's `RateLimitService/ShouldRateLimit` over `node:http2`, with gRPC's
 * framing done here: one length-prefixed message in, one out, the status in `grpc-status` and
 * `grpc-message` trailers. Undecodable messages are answered INVALID_ARGUMENT; every error
 * carries its stable code in the `sluice-error-code` trailer, its gRPC status derived from it.
 * Other methods are UNIMPLEMENTED, compressed messages are refused (UNIMPLEMENTED when the
 * `grpc-encoding` names an algorithm, INTERNAL when it names none), `grpc-timeout` deadlines
 * are kept (DEADLINE_EXCEEDED), messages over `maxMessageBytes` are RESOURCE_EXHAUSTED.
 */
export function buildGrpcServer(deps: GrpcDeps): GrpcServer {
  // Calls are decoded and decided in their address's turn, those of one turn together (see FairTurns).
  const { turns } = deps;
  const h2Options = {
    settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS },
    // A stream's body is read as it arrives; this bounds what the peer may send ahead of that.
    maxSessionMemory: 16,
  };
  // Over TLS the accepted sockets are handed over raw as well: the TLS server starts the
  // handshake on its own 'connection' event. A failed handshake is the peer's problem, not a log line.
  const http2: Http2Server | Http2SecureServer =
    deps.tls === undefined ? createH2Server(h2Options) : createH2SecureServer({ ...h2Options, ...deps.tls, allowHTTP1: false });
  if (deps.tls !== undefined) http2.on('tlsClientError', () => undefined);
  const sessions = new Sessions({
    idleTimeoutMs: deps.idleTimeoutMs,
    maxAgeMs: MAX_CONNECTION_AGE_MS,
    ageGraceMs: deps.bodyTimeoutMs,
    keepaliveMs: KEEPALIVE_MS,
    keepaliveTimeoutMs: KEEPALIVE_TIMEOUT_MS,
    writeTimeoutMs: deps.writeTimeoutMs ?? 5000,
    maxClientStreams: deps.maxClientStreams ?? 1000,
    onWriteTimeout: () => deps.metrics.connectionClosed('grpc', 'write_timeout'),
  });
  http2.on('session', (session) => sessions.add(session));
  // Not HTTP/2 (or not even HTTP): nothing to answer, the connection is closed at once.
  http2.on('unknownProtocol', (socket: { destroy(): void }) => socket.destroy());
  http2.on('sessionError', () => undefined);
  /** The calls of `Outcomes/Report` (every other call is `ShouldRateLimit`). */
  const outcomeStreams = new WeakSet<ServerHttp2Stream>();
  const RLS_SERVICE = RLS_PATH.slice(1, RLS_PATH.lastIndexOf('/'));
  /** The metadata of ShouldRateLimit calls, kept only with tracing on (it may carry the caller's trace). */
  const tracedHeaders = new WeakMap<ServerHttp2Stream, IncomingHttpHeaders>();
  /** When each call's stream opened (`performance.now()`), for its duration. */
  const startedAt = new WeakMap<ServerHttp2Stream, number>();
  /** Counts an answered call, labelled with its method, and times it from its stream's start. */
  const counted = (stream: ServerHttp2Stream, code: number) => {
    const method = outcomeStreams.has(stream) ? OUTCOMES_METHOD : METHOD;
    const t0 = startedAt.get(stream);
    deps.metrics.grpcRequest(method, code, t0 === undefined ? 0 : (performance.now() - t0) / 1000);
  };
  const rlqs =
    deps.quota === undefined
      ? undefined
      : new RlqsStreams({
          quota: deps.quota,
          token: deps.token,
          maxMessageBytes: deps.maxMessageBytes,
          maxKeyLength: deps.bounds.maxKeyLength,
          closing: deps.closing,
          warnings: deps.warnings,
          ended: (stream, code) => {
            const t0 = startedAt.get(stream);
            deps.metrics.grpcRequest(RLQS_METHOD, code, t0 === undefined ? 0 : (performance.now() - t0) / 1000);
          },
        });
  http2.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    startedAt.set(stream, performance.now());
    stream.on('error', () => undefined);
    // Over its address's bound of calls in progress: refused before anything is read.
    if (!sessions.admit(stream)) return;
    if (headers[':method'] !== 'POST') {
      respondHttp(stream, 405);
      return;
    }
    if (!isGrpcContentType(headers['content-type'])) {
      respondHttp(stream, 415);
      return;
    }
    if (headers[':path'] === OUTCOMES_PATH && deps.outcomes !== undefined) {
      serveCall(stream, headers);
      return;
    }
    if (headers[':path'] === RLQS_PATH && rlqs !== undefined) {
      rlqs.serve(stream, headers);
      return;
    }
    if (headers[':path'] !== RLS_PATH) {
      trailersOnly(stream, GrpcStatus.UNIMPLEMENTED, `the server does not implement the method ${String(headers[':path'])}`);
      stopReading(stream);
      return;
    }
    serveCall(stream, headers);
  });

  /** Answers a call with an error: its status derived from its code, the code in `sluice-error-code`. */
  const fail = (stream: ServerHttp2Stream, err: unknown) => {
    const { body, internal } = describeError(err);
    if (internal) deps.warnings.error('grpc_failed', { err }, 'ShouldRateLimit failed');
    const code = grpcStatusOf(body.code);
    counted(stream, code);
    trailersOnly(stream, code, `${body.code}: ${body.message}`, { 'sluice-error-code': body.code });
  };

  const serveCall = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    if (headers[':path'] === OUTCOMES_PATH) outcomeStreams.add(stream);
    else if (deps.tracing !== undefined) tracedHeaders.set(stream, headers);
    let answered = false;
    let deadline: NodeJS.Timeout | undefined;
    /** Answers once: a late decision after a deadline or a refused body is dropped. */
    const answer = (send: () => void) => {
      if (answered) return;
      answered = true;
      clearTimeout(deadline);
      if (stream.destroyed || stream.closed) return;
      send();
      // Answered before the request ended (refused, or past its deadline): the stream is freed
      // at once rather than held until the peer finishes sending.
      stopReading(stream);
    };
    stream.once('close', () => {
      answered = true;
      clearTimeout(deadline);
    });
    const reports = deps.outcomes !== undefined && outcomeStreams.has(stream) ? deps.outcomes : undefined;
    if (reports !== undefined ? !reports.access.allows(headers.authorization) : !authorized(headers.authorization, deps.token)) {
      const message = reports?.access.refusal ?? 'a valid bearer token is required';
      answer(() => fail(stream, new ServerError(ServerErrorCodes.UNAUTHORIZED, `${message} in the authorization metadata`)));
      return;
    }
    const timeoutMs = parseGrpcTimeout(headers['grpc-timeout']);
    if (timeoutMs !== undefined) {
      deadline = setTimeout(
        () =>
          answer(() => {
            counted(stream, GrpcStatus.DEADLINE_EXCEEDED);
            trailersOnly(stream, GrpcStatus.DEADLINE_EXCEEDED, 'Deadline exceeded');
          }),
        timeoutMs,
      );
    }
    const encoding = headers['grpc-encoding'];
    const reader = new UnaryReader(deps.maxMessageBytes);
    const refuse = (code: number, message: string, extra: OutgoingHttpHeaders = {}) =>
      answer(() => {
        counted(stream, code);
        trailersOnly(stream, code, message, extra);
      });
    stream.on('data', (chunk: Buffer) => {
      if (answered) return;
      const outcome = reader.push(chunk);
      if (outcome === undefined) return;
      if (outcome.kind === 'too-large') {
        refuse(
          GrpcStatus.RESOURCE_EXHAUSTED,
          `Received message larger than max (${outcome.length} vs. ${deps.maxMessageBytes})`,
          { 'sluice-error-code': ServerErrorCodes.BODY_TOO_LARGE },
        );
      } else if (outcome.kind === 'compressed') {
        if (encoding === undefined || encoding === 'identity') {
          refuse(GrpcStatus.INTERNAL, 'compressed flag set on a message without a grpc-encoding');
        } else {
          refuse(GrpcStatus.UNIMPLEMENTED, `grpc-encoding ${String(encoding)} is not supported`, {
            'grpc-accept-encoding': 'identity',
          });
        }
      } else if (outcome.kind === 'malformed') {
        answer(() => fail(stream, new ServerError(ServerErrorCodes.MALFORMED_BODY, `not a gRPC request: ${outcome.why}`)));
      }
    });
    stream.once('end', () => {
      if (answered) return;
      const outcome = reader.end();
      if (outcome.kind !== 'message') {
        const why = outcome.kind === 'malformed' ? outcome.why : outcome.kind;
        answer(() => fail(stream, new ServerError(ServerErrorCodes.MALFORMED_BODY, `not a gRPC request: ${why}`)));
        return;
      }
      decideCall(outcome.message, (send) => answer(send), stream);
    });
  };

  const decideCall = (message: Buffer, answer: (send: () => void) => void, stream: ServerHttp2Stream) => {
    if (deps.closing()) {
      answer(() => fail(stream, new ServerError(ServerErrorCodes.SHUTTING_DOWN, 'the server is shutting down')));
      return;
    }
    const client = stream.session?.socket?.remoteAddress ?? '';
    const outcomes = deps.outcomes !== undefined && outcomeStreams.has(stream) ? deps.outcomes : undefined;
    try {
      turns.enter(
        client,
        requestCost(message.length) + GRPC_CALL_COST,
        () =>
          outcomes === undefined
            ? rateLimitCall(client, message, answer, stream)
            : reportCall(client, message, answer, stream, outcomes),
        // In flight until the stream closes: see FairTurns' MAX_IN_FLIGHT.
        (finish) => finishOnClose(stream, stream.closed || stream.destroyed, finish),
      );
    } catch (err) {
      answer(() => fail(stream, err));
    }
  };

  /** `ShouldRateLimit`, in its address's turn. */
  const rateLimitCall = (client: string, message: Buffer, answer: (send: () => void) => void, stream: ServerHttp2Stream) => {
    let request;
    try {
      request = decodeRlsRequest(message, deps.bounds);
    } catch (err) {
      answer(() => fail(stream, err));
      return;
    }
    turns.charge(client, request.descriptors.length * ITEM_COST);
    const rls = request;
    const decided =
      deps.tracing === undefined
        ? deps.service.shouldRateLimit(rls)
        : deps.tracing.batch(
            {
              operation: 'ShouldRateLimit',
              items: rls.descriptors.length,
              headers: tracedHeaders.get(stream) ?? {},
              attributes: {
                'rpc.system': 'grpc',
                'rpc.service': RLS_SERVICE,
                'rpc.method': 'ShouldRateLimit',
                'sluice.domain': rls.domain,
              },
            },
            () => deps.service.shouldRateLimit(rls),
          );
    decided.then(
      (response) =>
        answer(() => {
          counted(stream, GrpcStatus.OK);
          const bytes = writeRateLimitResponse(response);
          stream.respond({ ':status': 200, 'content-type': GRPC_CONTENT_TYPE }, { waitForTrailers: true });
          stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', 'grpc-message': '' }));
          stream.end(frameMessage(bytes));
          sessions.answered(stream);
        }),
      (err: unknown) => answer(() => fail(stream, err)),
    );
  };

  /** `Outcomes/Report`: each outcome is answered on its own, as `POST /v1/outcomes` answers. */
  const reportCall = (
    client: string,
    message: Buffer,
    answer: (send: () => void) => void,
    stream: ServerHttp2Stream,
    outcomes: GrpcOutcomes,
  ) => {
    let items;
    try {
      items = decodeOutcomes(message, outcomes.bounds);
    } catch (err) {
      answer(() => fail(stream, err));
      return;
    }
    turns.charge(client, items.length * ITEM_COST);
    void Promise.all(
      items.map((d) =>
        d.ok
          ? deps.service.outcome(d.item).then(
              () => ({ recorded: true as const }),
              (error: unknown) => ({ error }),
            )
          : Promise.resolve({ error: d.error }),
      ),
    ).then((results) =>
      answer(() => {
        counted(stream, GrpcStatus.OK);
        stream.respond({ ':status': 200, 'content-type': GRPC_CONTENT_TYPE }, { waitForTrailers: true });
        stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', 'grpc-message': '' }));
        stream.end(frameMessage(encodeOutcomeResults(results)));
        sessions.answered(stream);
      }),
    );
  };

  return { http2, sessions, rlqs, turns };
}

/** A plain HTTP answer to a request that is not a gRPC call. */
function respondHttp(stream: ServerHttp2Stream, code: number): void {
  if (!stream.destroyed && !stream.headersSent) stream.respond({ ':status': code }, { endStream: true });
  stopReading(stream);
}

/** Ends a stream answered before its request ended: its peer may stop sending (RST_STREAM NO_ERROR). */
function stopReading(stream: ServerHttp2Stream): void {
  if (!stream.destroyed && !stream.readableEnded) stream.close(h2constants.NGHTTP2_NO_ERROR);
}

/** The gRPC listener: its port, and `close()` to stop accepting connections. */
export interface GrpcListener {
  readonly port: number;
  close(): void;
}

/**
 * Listens on host:port (0: any free port) and hands `server` the connections within `limits`;
 * `events` hear of each connection refused and of the count of open ones.
 */
export async function bindGrpc(
  server: GrpcServer,
  host: string,
  port: number,
  limits: ConnectionLimits,
  events: Pick<ConnectionEvents, 'cut' | 'open'>,
): Promise<GrpcListener> {
  // No Nagle: each answer is a few small frames, which would otherwise wait for the peer's ACK.
  const listener: NetServer = createNetServer({ noDelay: true });
  limitConnections(listener, limits, {
    ...events,
    accept: (socket) => {
      server.turns.connected(socket.remoteAddress ?? '');
      server.http2.emit('connection', socket);
    },
    // A full listener gives up idle connections of the address holding the most first.
    idle: (socket) => server.sessions.idle(socket),
  });
  listener.listen(port, host);
  await once(listener, 'listening');
  const address = listener.address();
  return {
    port: typeof address === 'object' && address !== null ? address.port : port,
    close: () => {
      listener.close();
    },
  };
}

/** Stops taking calls, lets in-flight ones finish within `graceMs`, then cuts the rest. */
export function shutdownGrpc(server: GrpcServer, graceMs: number): Promise<void> {
  // Quota streams never end by themselves: they are ended first, for Envoy to reconnect elsewhere.
  server.rlqs?.endAll();
  return server.sessions.close(graceMs);
}
