import {
  constants as h2constants,
  type Http2Session,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
  type ServerHttp2Stream,
} from 'node:http2';
import { authorized } from '../auth/auth.js';
import { GrpcStatus, ServerError, ServerErrorCodes, describeError, grpcStatusOf } from '../errors.js';
import type { WarningThrottle } from '../logging.js';
import type { QuotaService, QuotaStream } from '../quota/quota-service.js';
import { GRPC_CONTENT_TYPE, encodeGrpcMessage, frameMessage, parseGrpcTimeout, trailersOnly } from './framing.js';
import { decodeUsageReports, writeQuotaResponse } from './rlqs-wire.js';
import { MessageReader } from './stream-reader.js';

/** How `StreamRateLimitQuotas` is served: the quota service and the bounds on its streams. */
export interface GrpcQuota {
  readonly service: QuotaService;
  /** Most quota streams open on one connection. @default 4 */
  readonly maxStreamsPerConnection?: number;
  /** Most quota streams open over all connections of one remote address. @default 64 */
  readonly maxStreamsPerClient?: number;
}

/** What {@link RlqsStreams} needs of the gRPC server. */
export interface RlqsContext {
  readonly quota: GrpcQuota;
  /** The data plane's bearer token; none: streams are open. */
  readonly token: string | undefined;
  readonly maxMessageBytes: number;
  /** Longest domain, and longest key or value of a bucket id. */
  readonly maxKeyLength: number;
  readonly closing: () => boolean;
  /** Told of each stream's end with its status. */
  readonly ended: (stream: ServerHttp2Stream, code: number) => void;
  readonly warnings: WarningThrottle;
}

/** Most pairs of a bucket id a report may carry. */
export const MAX_BUCKET_PAIRS = 16;
/** Reports of one stream waiting for the one in progress; more close the stream (the peer sends faster than it is answered). */
const MAX_QUEUED_REPORTS = 8;

/**
 * The bidirectional streams of Envoy's `RateLimitQuotaService/StreamRateLimitQuotas`: usage
 * reports in, each answered with a `RateLimitQuotaResponse` of bucket actions when it has any.
 * Streams are bounded per connection and per client address; a report that is not one, breaks
 * Envoy's rules or the bounds ends the stream with its status (the server and the connection's
 * other calls go on); the peer's end of its side ends the stream with OK once its reports are answered.
 */
export class RlqsStreams {
  readonly #ctx: RlqsContext;
  readonly #perConnection = new WeakMap<Http2Session, number>();
  readonly #perClient = new Map<string, number>();
  readonly #open = new Set<{ end: (code: number, message: string, extra?: OutgoingHttpHeaders) => void }>();

  constructor(ctx: RlqsContext) {
    this.#ctx = ctx;
  }

  /** How many quota streams are open. */
  get size(): number {
    return this.#open.size;
  }

  /** Ends every open stream with UNAVAILABLE (the server is going away: Envoy opens a new one elsewhere). */
  endAll(): void {
    for (const s of [...this.#open]) {
      s.end(GrpcStatus.UNAVAILABLE, `${ServerErrorCodes.SHUTTING_DOWN}: the server is shutting down`, {
        'sluice-error-code': ServerErrorCodes.SHUTTING_DOWN,
      });
    }
  }

  serve(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    const ctx = this.#ctx;
    const refuse = (err: ServerError) => {
      const { body } = describeError(err);
      const code = grpcStatusOf(body.code);
      ctx.ended(stream, code);
      endAtOnce(stream, code, `${body.code}: ${body.message}`, { 'sluice-error-code': body.code });
    };
    if (!authorized(headers.authorization, ctx.token)) {
      refuse(new ServerError(ServerErrorCodes.UNAUTHORIZED, 'a valid bearer token is required in the authorization metadata'));
      return;
    }
    if (ctx.closing()) {
      refuse(new ServerError(ServerErrorCodes.SHUTTING_DOWN, 'the server is shutting down'));
      return;
    }
    const session = stream.session;
    const client = session?.socket?.remoteAddress ?? '';
    const onConnection = session === undefined ? 0 : (this.#perConnection.get(session) ?? 0);
    const ofClient = this.#perClient.get(client) ?? 0;
    const maxConnection = ctx.quota.maxStreamsPerConnection ?? 4;
    const maxClient = ctx.quota.maxStreamsPerClient ?? 64;
    if (onConnection >= maxConnection || ofClient >= maxClient) {
      const which = onConnection >= maxConnection ? `${maxConnection} per connection` : `${maxClient} per client address`;
      refuse(new ServerError(ServerErrorCodes.CLIENT_BUSY, `at most ${which} quota streams may be open`));
      return;
    }
    if (session !== undefined) this.#perConnection.set(session, onConnection + 1);
    this.#perClient.set(client, ofClient + 1);

    const quota: QuotaStream = ctx.quota.service.open();
    const reader = new MessageReader(ctx.maxMessageBytes);
    const encoding = headers['grpc-encoding'];
    const queue: Buffer[] = [];
    let busy = false;
    let peerEnded = false;
    let ended = false;
    let headersSent = false;
    let deadline: NodeJS.Timeout | undefined;

    const handle = {
      end: (code: number, message: string, extra: OutgoingHttpHeaders = {}) => {
        if (ended) return;
        ended = true;
        clearTimeout(deadline);
        ctx.ended(stream, code);
        if (stream.destroyed || stream.closed) return;
        if (!headersSent) {
          endAtOnce(stream, code, message, extra);
        } else {
          stream.once('wantTrailers', () => {
            stream.sendTrailers({ 'grpc-status': String(code), 'grpc-message': encodeGrpcMessage(message), ...extra });
            // The peer may still be sending: it is told to stop (RST_STREAM NO_ERROR) once the status is out.
            if (!stream.readableEnded) stream.close(h2constants.NGHTTP2_NO_ERROR);
          });
          stream.end();
        }
      },
    };
    const fail = (err: unknown) => {
      const { body, internal } = describeError(err);
      if (internal) ctx.warnings.error('rlqs_failed', { err }, 'StreamRateLimitQuotas failed');
      handle.end(grpcStatusOf(body.code), `${body.code}: ${body.message}`, { 'sluice-error-code': body.code });
    };
    this.#open.add(handle);
    stream.once('close', () => {
      handle.end(GrpcStatus.CANCELLED, 'the stream was closed');
      this.#open.delete(handle);
      quota.close();
      if (session !== undefined) {
        const left = (this.#perConnection.get(session) ?? 1) - 1;
        if (left > 0) this.#perConnection.set(session, left);
        else this.#perConnection.delete(session);
      }
      const left = (this.#perClient.get(client) ?? 1) - 1;
      if (left > 0) this.#perClient.set(client, left);
      else this.#perClient.delete(client);
    });

    const timeoutMs = parseGrpcTimeout(headers['grpc-timeout']);
    if (timeoutMs !== undefined)
      deadline = setTimeout(() => handle.end(GrpcStatus.DEADLINE_EXCEEDED, 'Deadline exceeded'), timeoutMs);

    const send = (bytes: Buffer) => {
      if (ended || stream.destroyed || stream.closed) return;
      if (!headersSent) {
        headersSent = true;
        stream.respond({ ':status': 200, 'content-type': GRPC_CONTENT_TYPE }, { waitForTrailers: true });
      }
      // A peer that does not take its answers is not buffered for: its stream is cut.
      if (stream.writableLength > 4 * ctx.maxMessageBytes) {
        ended = true;
        clearTimeout(deadline);
        ctx.ended(stream, GrpcStatus.RESOURCE_EXHAUSTED);
        stream.close(h2constants.NGHTTP2_ENHANCE_YOUR_CALM);
        return;
      }
      stream.write(frameMessage(bytes));
    };

    // A rule change's new assignments, pushed between reports.
    quota.onPush = (actions) => send(writeQuotaResponse(actions));

    const next = () => {
      if (busy || ended) return;
      const message = queue.shift();
      if (message === undefined) {
        if (peerEnded) handle.end(GrpcStatus.OK, '');
        return;
      }
      busy = true;
      let report;
      try {
        report = decodeUsageReports(message, {
          maxBuckets: ctx.quota.service.maxBuckets,
          maxPairs: MAX_BUCKET_PAIRS,
          maxKeyLength: ctx.maxKeyLength,
        });
      } catch (err) {
        busy = false;
        fail(err);
        return;
      }
      quota.report(report.domain, report.usages).then(
        (actions) => {
          busy = false;
          if (actions.length > 0) send(writeQuotaResponse(actions));
          next();
        },
        (err: unknown) => {
          busy = false;
          fail(err);
        },
      );
    };

    stream.on('data', (chunk: Buffer) => {
      if (ended) return;
      const read = reader.push(chunk);
      if (read.kind === 'too-large') {
        handle.end(
          GrpcStatus.RESOURCE_EXHAUSTED,
          `Received message larger than max (${read.length} vs. ${ctx.maxMessageBytes})`,
          {
            'sluice-error-code': ServerErrorCodes.BODY_TOO_LARGE,
          },
        );
      } else if (read.kind === 'compressed') {
        if (encoding === undefined || encoding === 'identity') {
          handle.end(GrpcStatus.INTERNAL, 'compressed flag set on a message without a grpc-encoding');
        } else {
          handle.end(GrpcStatus.UNIMPLEMENTED, `grpc-encoding ${String(encoding)} is not supported`, {
            'grpc-accept-encoding': 'identity',
          });
        }
      } else if (read.kind === 'malformed') {
        fail(new ServerError(ServerErrorCodes.MALFORMED_BODY, `not a gRPC message: ${read.why}`));
      } else {
        queue.push(...read.messages);
        if (queue.length > MAX_QUEUED_REPORTS) {
          fail(new ServerError(ServerErrorCodes.CLIENT_BUSY, `more than ${MAX_QUEUED_REPORTS} reports wait for an answer`));
          return;
        }
        next();
      }
    });
    stream.once('end', () => {
      peerEnded = true;
      if (ended) return;
      if (!reader.clean) {
        fail(new ServerError(ServerErrorCodes.MALFORMED_BODY, 'not a gRPC message: the last report is truncated'));
        return;
      }
      next();
    });
  }
}

/** A trailers-only answer, then the peer told to stop sending (RST_STREAM NO_ERROR). */
function endAtOnce(stream: ServerHttp2Stream, code: number, message: string, extra: OutgoingHttpHeaders): void {
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  trailersOnly(stream, code, message, extra);
  if (!stream.readableEnded) stream.close(h2constants.NGHTTP2_NO_ERROR);
}
