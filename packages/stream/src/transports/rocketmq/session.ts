/**
 * One RocketMQ client as the gRPC proxy sees it: a client id sent with every call, a telemetry
 * stream that tells the proxy what the client is (producer, simple or lite consumer) and gets
 * its settings back, and a heartbeat every 10 s that keeps a consumer registered.
 *
 * The proxy keys everything on the client id: the settings a receive call is served with, and
 * the lite subscriptions the broker dispatches arriving messages to. `close()` says goodbye
 * (NotifyClientTermination), which drops those subscriptions at once instead of when the
 * broker next sweeps for clients it has not heard from.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type {
  CallOptions,
  ClientDuplexStream,
  ClientReadableStream,
  Metadata as GrpcMetadata,
  ServiceError,
} from '@grpc/grpc-js';
import { TransportError, TransportErrorCodes } from '../../errors.js';
import { grpc, duration, type Message, type MessageQueue, type MessagingClient, type Status } from './client.js';

/** How often a session tells the proxy it is alive. */
const HEARTBEAT_MS = 10_000;
/** The protocol version the session speaks, sent as its client version. */
const CLIENT_VERSION = '5.0.8';

/** This host's name, as clients and messages report it. */
export const HOST = hostname();

let sessions = 0;

/** A call answered with a status other than OK. */
export class RocketMqStatusError extends Error {
  constructor(
    readonly code: string,
    what: string,
    detail: string | undefined,
  ) {
    super(`${what}: ${code}${detail ? ` (${detail})` : ''}`);
    this.name = 'RocketMqStatusError';
  }
}

export type ClientType = 'PRODUCER' | 'SIMPLE_CONSUMER' | 'LITE_PUSH_CONSUMER';

export interface SessionOptions {
  /** `host:port` of the proxy. */
  readonly endpoints: string;
  readonly clientType: ClientType;
  /** Consumers: the group; producers: none. */
  readonly group?: string;
  /** Consumers: the topic subscribed (for a lite consumer, the LITE parent); producers: the topics published to. */
  readonly topics: readonly string[];
  /** Bound on one call, in ms. */
  readonly requestTimeoutMs: number;
  /** Bound on registering with the proxy (the telemetry handshake), in ms. */
  readonly connectTimeoutMs: number;
  /** Consumers: the tag filter (`*` for all). */
  readonly tag?: string;
  /** Consumers: long-polling wait of one receive, in ms. */
  readonly awaitMs?: number;
  /** The proxy told the client to drop a lite topic (another client took it). */
  readonly onUnsubscribeLite?: (liteTopic: string) => void;
}

interface TelemetryCommand {
  settings?: unknown;
  notifyUnsubscribeLiteCommand?: { liteTopic?: string };
}
type Telemetry = ClientDuplexStream<{ settings: unknown }, TelemetryCommand>;

/** The unary methods the transport calls. */
export type UnaryMethod =
  | 'QueryRoute'
  | 'Heartbeat'
  | 'SendMessage'
  | 'AckMessage'
  | 'ChangeInvisibleDuration'
  | 'SyncLiteSubscription'
  | 'NotifyClientTermination';
type Unary<T> = (
  request: object,
  metadata: GrpcMetadata,
  options: CallOptions,
  callback: (err: ServiceError | null, response: T) => void,
) => unknown;
type ServerStream = (request: object, metadata: GrpcMetadata, options: CallOptions) => ClientReadableStream<unknown>;

function statusOk(status: Status | undefined): boolean {
  return status === undefined || status.code === 'OK';
}

/** The RocketMQ v2 protocol's timestamp header: `yyyyMMddTHHmmssZ`. */
function dateTime(now: Date): string {
  return now.toISOString().replace(/[-:]/g, '').replace(/\.\d+/, '');
}

export class RocketMqSession {
  readonly clientId: string;
  private readonly accessPoint: { scheme: string; addresses: { host: string; port: number }[] };
  private telemetry: Telemetry | undefined;
  /** The telemetry stream being opened: close() cancels it rather than wait for the handshake. */
  private connecting: Telemetry | undefined;
  private opening: Promise<void> | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private closed = false;
  /**
   * Counts the telemetry streams opened. When the proxy loses a client's stream it drops the
   * client's lite subscriptions, so a lite consumer sends its whole set again when this moves.
   */
  generation = 0;

  constructor(
    private readonly client: MessagingClient,
    private readonly o: SessionOptions,
  ) {
    this.clientId = `${HOST}@${process.pid}@${sessions++}@${randomBytes(4).toString('hex')}`;
    const at = o.endpoints.lastIndexOf(':');
    this.accessPoint = {
      scheme: 'IPv4',
      addresses: [{ host: o.endpoints.slice(0, at), port: Number(o.endpoints.slice(at + 1)) }],
    };
  }

  private metadata(): GrpcMetadata {
    const m = new grpc.Metadata();
    m.set('x-mq-protocol', 'v2');
    m.set('x-mq-client-id', this.clientId);
    m.set('x-mq-language', 'NODE_JS');
    m.set('x-mq-client-version', CLIENT_VERSION);
    m.set('x-mq-request-id', randomUUID());
    m.set('x-mq-date-time', dateTime(new Date()));
    return m;
  }

  private settings(): Record<string, unknown> {
    const o = this.o;
    const common = {
      clientType: o.clientType,
      accessPoint: this.accessPoint,
      requestTimeout: duration(o.requestTimeoutMs),
      userAgent: { language: 'NODE_JS', version: CLIENT_VERSION, platform: process.platform, hostname: HOST },
    };
    if (o.clientType === 'PRODUCER') {
      return { ...common, publishing: { topics: o.topics.map((name) => ({ name })), validateMessageType: true } };
    }
    return {
      ...common,
      subscription: {
        group: { name: o.group },
        subscriptions: o.topics.map((name) => ({ topic: { name }, expression: { type: 'TAG', expression: o.tag ?? '*' } })),
        // Lite groups are orderly: the broker hands out a lite topic's next messages only after
        // the ones before them were acknowledged, which keeps each partition in order.
        fifo: o.clientType === 'LITE_PUSH_CONSUMER',
        receiveBatchSize: 32,
        longPollingTimeout: duration(o.awaitMs ?? 5_000),
      },
    };
  }

  /**
   * Resolves once the proxy has this client's settings: opens the telemetry stream when it is
   * not open (first call, or the stream broke) and waits for the settings to come back.
   */
  ready(): Promise<void> {
    if (this.closed) return Promise.reject(new TransportError(TransportErrorCodes.CLOSED, 'rocketmq session is closed'));
    if (this.telemetry) return Promise.resolve();
    this.opening ??= this.open().finally(() => {
      this.opening = undefined;
    });
    return this.opening;
  }

  private async open(): Promise<void> {
    await this.openTelemetry();
    this.generation++;
    try {
      await this.sendHeartbeat();
    } catch (err) {
      // Not registered: the next ready() opens a new stream instead of taking this one as done.
      this.telemetry?.cancel();
      this.telemetry = undefined;
      throw err;
    }
    this.heartbeat ??= setInterval(() => {
      // A broken telemetry stream is opened again here, so a session recovers without a caller.
      (this.telemetry ? this.sendHeartbeat() : this.ready()).catch(() => undefined);
    }, HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  private sendHeartbeat(): Promise<unknown> {
    const group = this.o.group === undefined ? {} : { group: { name: this.o.group } };
    return this.call('Heartbeat', { ...group, clientType: this.o.clientType });
  }

  private openTelemetry(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const stream = (this.client as unknown as { Telemetry(m: GrpcMetadata): Telemetry }).Telemetry(this.metadata());
      let settled = false;
      const timer = setTimeout(
        () =>
          drop(
            new TransportError(TransportErrorCodes.UNAVAILABLE, `telemetry: no settings within ${this.o.connectTimeoutMs} ms`),
          ),
        this.o.connectTimeoutMs,
      );
      timer.unref();
      this.connecting = stream;
      const drop = (err: Error): void => {
        clearTimeout(timer);
        if (this.connecting === stream) this.connecting = undefined;
        if (this.telemetry === stream) this.telemetry = undefined;
        stream.cancel();
        if (!settled) {
          settled = true;
          reject(err);
        }
      };
      stream.on('data', (command: TelemetryCommand) => {
        if (command.settings && !settled) {
          settled = true;
          clearTimeout(timer);
          this.connecting = undefined;
          this.telemetry = stream;
          resolve();
        }
        const liteTopic = command.notifyUnsubscribeLiteCommand?.liteTopic;
        if (liteTopic) this.o.onUnsubscribeLite?.(liteTopic);
      });
      stream.on('error', drop);
      stream.on('end', () => drop(new TransportError(TransportErrorCodes.UNAVAILABLE, 'telemetry: the proxy ended the stream')));
      stream.write({ settings: this.settings() });
    });
  }

  /** Calls a unary method; rejects on a transport error or a status other than OK. */
  call<T extends object = object>(method: UnaryMethod, request: object, timeoutMs = this.o.requestTimeoutMs): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const raw = this.client as unknown as Record<UnaryMethod, Unary<T & { status?: Status }>>;
      raw[method].call(this.client, request, this.metadata(), { deadline: Date.now() + timeoutMs }, (err, response) => {
        if (err) return reject(err);
        if (!statusOk(response.status)) {
          return reject(new RocketMqStatusError(response.status!.code ?? 'UNKNOWN', method, response.status!.message));
        }
        resolve(response);
      });
    });
  }

  /** The message queues of `topic`. */
  async route(topic: string): Promise<MessageQueue[]> {
    const r = await this.call<{ messageQueues?: MessageQueue[] }>('QueryRoute', {
      topic: { name: topic },
      endpoints: this.accessPoint,
    });
    return r.messageQueues ?? [];
  }

  /**
   * One long-polling receive from `queue`, bounded by its deadline. It is never cancelled: the
   * proxy may already have taken messages for it, and a cancelled call would leave them
   * invisible for `invisibleMs` (and, on an orderly lite group, hold their lite topic back as
   * long). A stopping consumer waits for it and hands back what it brought.
   *
   * `attemptId` (orderly groups) names the attempt: a receive sent again with the same id after
   * its answer was lost (the deadline passed) gets the messages the broker had taken for it,
   * instead of leaving them invisible for `invisibleMs`.
   */
  receive(queue: MessageQueue, batchSize: number, invisibleMs: number, attemptId?: string): Promise<Message[]> {
    const o = this.o;
    const awaitMs = o.awaitMs ?? 5_000;
    return new Promise<Message[]>((resolve, reject) => {
      const messages: Message[] = [];
      let status: Status | undefined;
      const call = (this.client as unknown as { ReceiveMessage: ServerStream }).ReceiveMessage(
        {
          group: { name: o.group },
          messageQueue: queue,
          filterExpression: { type: 'TAG', expression: o.tag ?? '*' },
          batchSize,
          invisibleDuration: duration(invisibleMs),
          autoRenew: false,
          longPollingTimeout: duration(awaitMs),
          ...(attemptId === undefined ? {} : { attemptId }),
        },
        this.metadata(),
        { deadline: Date.now() + awaitMs + o.requestTimeoutMs },
      );
      call.on('data', (r: { status?: Status; message?: Message }) => {
        if (r.message) messages.push(r.message);
        else if (r.status) status = r.status;
      });
      call.on('error', reject);
      call.on('end', () => {
        if (status && !statusOk(status) && status.code !== 'MESSAGE_NOT_FOUND') {
          reject(new RocketMqStatusError(status.code ?? 'UNKNOWN', 'ReceiveMessage', status.message));
        } else {
          resolve(messages);
        }
      });
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    if (this.telemetry && this.o.group !== undefined) {
      // Best effort: a proxy that is away cannot be told; the broker sweeps the client later.
      await this.call('NotifyClientTermination', { group: { name: this.o.group } }).catch(() => undefined);
    }
    this.telemetry?.cancel();
    this.telemetry = undefined;
    this.connecting?.cancel();
  }
}
