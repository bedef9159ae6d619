/**
 * The RocketMQ transport against a fake proxy (a gRPC server speaking the same v2 protocol
 * definition): what the transport asks the proxy for, in which order, and what it does with
 * what comes back. The real proxy and broker are tested in packages/stream/test/transports.
 */
import type { ServerDuplexStream, ServerWritableStream, ServerUnaryCall, sendUnaryData } from '@grpc/grpc-js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TransportErrorCodes } from '../../errors.js';
import { grpc, MESSAGING_SERVICE, type Message } from './client.js';
import { RocketMqTransport } from './transport.js';

const OK = { code: 'OK', message: 'OK' };

interface Call {
  readonly method: string;
  readonly request: Record<string, unknown>;
}

/** A proxy that answers every call, records it, and serves the messages a test queues. */
class FakeProxy {
  readonly calls: Call[] = [];
  readonly telemetry: ServerDuplexStream<unknown, unknown>[] = [];
  private readonly queued: Message[] = [];
  /** What each receive attempt took, served again to a receive of the same attempt (as the broker does). */
  private readonly attempts = new Map<string, Message[]>();
  /** Receives answered only after this long (past a client's deadline), from the next one on. */
  slowReceives = 0;
  slowMs = 0;
  private readonly server = new grpc.Server();
  port = 0;

  async start(): Promise<void> {
    const unary =
      (method: string, answer: (request: Record<string, unknown>) => object = () => ({ status: OK })) =>
      (call: ServerUnaryCall<Record<string, unknown>, unknown>, done: sendUnaryData<unknown>) => {
        this.calls.push({ method, request: call.request });
        done(null, answer(call.request));
      };
    this.server.addService(MESSAGING_SERVICE, {
      Telemetry: (stream: ServerDuplexStream<{ settings?: unknown }, unknown>) => {
        this.telemetry.push(stream);
        stream.on('data', (command: { settings?: unknown }) => {
          if (command.settings) stream.write({ status: OK, settings: command.settings });
        });
        stream.on('end', () => stream.end());
        stream.on('error', () => undefined);
      },
      QueryRoute: unary('QueryRoute', (r) => ({
        status: OK,
        messageQueues: [{ topic: r.topic, id: 0, permission: 'READ_WRITE', broker: { name: 'broker-a' } }],
      })),
      Heartbeat: unary('Heartbeat'),
      SyncLiteSubscription: unary('SyncLiteSubscription'),
      AckMessage: unary('AckMessage'),
      ChangeInvisibleDuration: unary('ChangeInvisibleDuration'),
      NotifyClientTermination: unary('NotifyClientTermination'),
      SendMessage: unary('SendMessage', () => ({ status: OK, entries: [{ status: OK, messageId: 'm' }] })),
      ReceiveMessage: (call: ServerWritableStream<Record<string, unknown>, unknown>) => {
        this.calls.push({ method: 'ReceiveMessage', request: call.request });
        const attemptId = call.request.attemptId as string | undefined;
        const batch = (attemptId && this.attempts.get(attemptId)) || this.queued.splice(0, 32);
        if (attemptId) this.attempts.set(attemptId, batch);
        const finish = (): void => {
          if (call.cancelled) return;
          for (const message of batch) call.write({ message });
          call.write({ status: batch.length > 0 ? OK : { code: 'MESSAGE_NOT_FOUND', message: 'no new message' } });
          call.end();
        };
        // An empty receive long-polls briefly, as the proxy does.
        if (batch.length > 0 && this.slowReceives > 0) {
          this.slowReceives--;
          setTimeout(finish, this.slowMs);
        } else if (batch.length > 0) finish();
        else setTimeout(finish, 50);
      },
    });
    this.port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) =>
        err ? reject(err) : resolve(port),
      ),
    );
  }

  queue(liteTopic: string, ...bodies: string[]): void {
    for (const body of bodies) {
      const id = `${liteTopic}/${body}`;
      this.queued.push({
        topic: { name: 'sluice-events' },
        systemProperties: { messageId: id, receiptHandle: `rh-${id}`, liteTopic },
        body: Buffer.from(body),
      });
    }
  }

  of(method: string): Record<string, unknown>[] {
    return this.calls.filter((c) => c.method === method).map((c) => c.request);
  }

  stop(): Promise<void> {
    return new Promise((resolve) => this.server.tryShutdown(() => resolve()));
  }
}

async function until(done: () => boolean, what: string): Promise<void> {
  const end = Date.now() + 10_000;
  while (!done()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('RocketMqTransport options', () => {
  const invalid = expect.objectContaining({ code: TransportErrorCodes.INVALID });
  it('rejects a bad mode, endpoint or a prefix too long for lite topic names', () => {
    expect(() => new RocketMqTransport({ partitions: 4, endpoints: 'x:1', mode: 'queues' as 'lite' })).toThrow(invalid);
    expect(() => new RocketMqTransport({ partitions: 4, endpoints: 'localhost' })).toThrow(invalid);
    expect(() => new RocketMqTransport({ partitions: 4, endpoints: 'a b:1' })).toThrow(invalid);
    // 60 characters + "-p-3" is 64: the longest lite topic the proxy takes; one more is refused.
    expect(() => new RocketMqTransport({ partitions: 4, endpoints: 'x:1', prefix: 'p'.repeat(60) })).not.toThrow();
    expect(() => new RocketMqTransport({ partitions: 4, endpoints: 'x:1', prefix: 'p'.repeat(61) })).toThrow(invalid);
    // Topics mode has no lite topics to name.
    expect(
      () => new RocketMqTransport({ partitions: 4, endpoints: 'x:1', prefix: 'p'.repeat(61), mode: 'topics' }),
    ).not.toThrow();
  });
});

describe('RocketMqTransport against a fake proxy', () => {
  let proxy: FakeProxy;
  let transport: RocketMqTransport;
  beforeEach(async () => {
    proxy = new FakeProxy();
    await proxy.start();
    transport = new RocketMqTransport({ partitions: 4, endpoints: `127.0.0.1:${proxy.port}`, prefix: 's', awaitMs: 100 });
  });
  afterEach(async () => {
    await transport.close();
    await proxy.stop();
  });

  it('subscribes a partition as a lite topic, handles it in order with its lag, acknowledges it', async () => {
    const seen: { body: string; lag: number | undefined }[] = [];
    const sub = await transport.consume(2, 'aggregators', async (batch, info) => {
      seen.push({ body: Buffer.from(batch).toString(), lag: info.lag });
    });
    expect(proxy.of('SyncLiteSubscription')).toEqual([
      expect.objectContaining({ action: 'PARTIAL_ADD', liteTopicSet: ['s-p-2'], topic: { name: 'sluice-events' } }),
    ]);
    proxy.queue('s-p-2', 'a', 'b', 'c');
    await until(() => seen.length === 3 && proxy.of('AckMessage').length === 1, 'three batches acknowledged');
    expect(seen).toEqual([
      { body: 'a', lag: 2 },
      { body: 'b', lag: 1 },
      { body: 'c', lag: 0 },
    ]);
    const ack = proxy.of('AckMessage')[0]!;
    expect(ack.group).toEqual({ name: 'aggregators' });
    expect((ack.entries as { liteTopic: string; receiptHandle: string }[]).map((e) => [e.liteTopic, e.receiptHandle])).toEqual([
      ['s-p-2', 'rh-s-p-2/a'],
      ['s-p-2', 'rh-s-p-2/b'],
      ['s-p-2', 'rh-s-p-2/c'],
    ]);
    await sub.stop();
    expect(proxy.of('SyncLiteSubscription').at(-1)).toEqual(
      expect.objectContaining({ action: 'PARTIAL_REMOVE', liteTopicSet: ['s-p-2'] }),
    );
  });

  it('sends a receive whose answer was lost again as the same attempt, and the next one as a new attempt', async () => {
    const lossy = new RocketMqTransport({
      partitions: 4,
      endpoints: `127.0.0.1:${proxy.port}`,
      prefix: 's',
      awaitMs: 100,
      commandTimeoutMs: 100,
      retryBaseMs: 10,
    });
    try {
      const seen: string[] = [];
      await lossy.consume(1, 'aggregators', async (batch) => void seen.push(Buffer.from(batch).toString()));
      // The answer to the receive that takes a and b comes after the client's deadline.
      proxy.slowReceives = 1;
      proxy.slowMs = 500;
      proxy.queue('s-p-1', 'a', 'b');
      await until(() => seen.length === 2, 'a and b handled');
      proxy.queue('s-p-1', 'c');
      await until(() => seen.length === 3, 'c handled');
      expect(seen).toEqual(['a', 'b', 'c']);
      const attempts = proxy.of('ReceiveMessage').map((r) => r.attemptId as string);
      expect(attempts.every((id) => typeof id === 'string' && id.length > 0)).toBe(true);
      // The lost receive and the one sent again share an attempt; every other receive has its own.
      const taken = attempts.filter((id) => attempts.indexOf(id) !== attempts.lastIndexOf(id));
      expect(new Set(taken).size).toBe(1);
      expect(taken).toHaveLength(2);
    } finally {
      await lossy.close();
    }
  });

  it('hands back at once what arrives for a lite topic it does not read', async () => {
    await transport.consume(0, 'aggregators', async () => {});
    proxy.queue('s-p-3', 'x');
    await until(() => proxy.of('ChangeInvisibleDuration').length === 1, 'hand back');
    expect(proxy.of('ChangeInvisibleDuration')[0]).toEqual(
      expect.objectContaining({ receiptHandle: 'rh-s-p-3/x', liteTopic: 's-p-3', invisibleDuration: { seconds: 1, nanos: 0 } }),
    );
    expect(proxy.of('AckMessage')).toEqual([]);
  });

  it('after a new telemetry stream, sends its whole set again, without a lite topic another client took', async () => {
    await transport.consume(0, 'aggregators', async () => {});
    await transport.consume(1, 'aggregators', async () => {});
    await until(() => proxy.telemetry.length === 1, 'telemetry');
    // Another client of the exclusive group subscribed s-p-1: the proxy says so.
    proxy.telemetry[0]!.write({ status: OK, notifyUnsubscribeLiteCommand: { liteTopic: 's-p-1' } });
    await new Promise((r) => setTimeout(r, 100));
    // The proxy ends the stream (and drops the client's subscriptions).
    proxy.telemetry[0]!.end();
    await until(
      () => proxy.of('SyncLiteSubscription').some((r) => r.action === 'COMPLETE_ADD'),
      'a full sync after the new stream',
    );
    const complete = proxy.of('SyncLiteSubscription').find((r) => r.action === 'COMPLETE_ADD')!;
    expect(complete.liteTopicSet).toEqual(['s-p-0']);
    expect(proxy.telemetry.length).toBe(2);
  });

  it('says goodbye to the proxy on close and publishes one message per lite batch', async () => {
    await transport.publish(3, new Uint8Array([1, 2, 3]));
    const sent = proxy.of('SendMessage')[0]!.messages as Message[];
    expect(sent).toHaveLength(1);
    expect(sent[0]!.topic.name).toBe('sluice-events');
    expect(sent[0]!.systemProperties).toEqual(expect.objectContaining({ liteTopic: 's-p-3', messageType: 'LITE', tag: 's' }));
    await transport.consume(0, 'aggregators', async () => {});
    await transport.close();
    expect(proxy.of('NotifyClientTermination')).toEqual([expect.objectContaining({ group: { name: 'aggregators' } })]);
    await expect(transport.publish(0, new Uint8Array([1]))).rejects.toMatchObject({ code: TransportErrorCodes.CLOSED });
  });

  it('reads decisions through groups named after subscriberId, the same after a restart', async () => {
    const endpoints = `127.0.0.1:${proxy.port}`;
    const groups = (): unknown[] => proxy.of('ReceiveMessage').map((r) => (r.group as { name: string }).name);
    for (let run = 0; run < 2; run++) {
      const gateway = new RocketMqTransport({ partitions: 4, endpoints, prefix: 's', awaitMs: 100, subscriberId: 'gw-1' });
      await gateway.subscribeDecisions(() => {});
      await gateway.subscribeDecisions(() => {});
      await until(() => new Set(groups()).size === 2, 'both subscriptions receiving');
      await gateway.close();
    }
    expect(new Set(groups())).toEqual(new Set(['s_d_gw-1_0', 's_d_gw-1_1']));
    expect(() => new RocketMqTransport({ partitions: 4, endpoints, subscriberId: 'a b' })).toThrow(
      expect.objectContaining({ code: TransportErrorCodes.INVALID }),
    );
  });
});
