/**
 * What the store does when Redis is unreachable, slow, or holds foreign data, and with bad
 * input: always a typed error within its time bound, never a hang.
 */
import { once } from 'node:events';
import { createServer, type Socket } from 'node:net';
import { ErrorCodes, SluiceError, compileLimits, type CompiledLimit } from '@sluice/core';
import { Redis } from 'ioredis';
import { RedisStore, batchScriptSource, keyNames } from '../src/index.js';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { redisUrl } from '../../../test/env.js';
import { cleanUp, standalone } from './helpers.js';
import { packAny } from './msgpack.js';

const limits = compileLimits({ algorithm: 'token-bucket', limit: 10, windowMs: 60_000 });
const request = (key = 'k') => ({ key, limits, cost: 1, leaseId: '' });

/** Resolves to the SluiceError `promise` rejects with, and how long that took. */
async function failure(promise: Promise<unknown>): Promise<{ error: SluiceError; ms: number }> {
  const start = performance.now();
  const error = await promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(SluiceError);
  return { error: error as SluiceError, ms: performance.now() - start };
}

/**
 * A TCP server on loopback speaking just enough RESP to look like a Redis that misbehaves:
 * `answer` gets each command (lower-case name and arguments) and returns the raw reply to
 * write, or undefined to stay silent.
 */
async function fakeRedis(answer: (command: string[], socket: Socket) => string | undefined) {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let pending = '';
    socket.on('data', (d) => {
      pending += d.toString('latin1');
      for (;;) {
        const parsed = parseCommand(pending);
        if (parsed === undefined) return;
        pending = pending.slice(parsed.length);
        const reply = answer(parsed.command, socket);
        if (reply !== undefined && !socket.destroyed) socket.write(reply);
      }
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    url: `redis://127.0.0.1:${port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

/** One RESP command (an array of bulk strings) from the front of `text`, if complete. */
function parseCommand(text: string): { command: string[]; length: number } | undefined {
  const lines = /^\*(\d+)\r\n/.exec(text);
  if (!lines) return undefined;
  let at = lines[0].length;
  const command: string[] = [];
  for (let i = 0; i < Number(lines[1]); i++) {
    const head = /^\$(\d+)\r\n/.exec(text.slice(at));
    if (!head) return undefined;
    const start = at + head[0].length;
    const end = start + Number(head[1]);
    if (text.length < end + 2) return undefined;
    command.push(text.slice(start, end));
    at = end + 2;
  }
  command[0] = command[0]!.toLowerCase();
  return { command, length: at };
}

/** Answers what ioredis asks while connecting, so the connection becomes ready. */
function handshake(command: string[]): string | undefined {
  if (command[0] === 'info') {
    const body = '# Server\r\nredis_version:7.0.0\r\nloading:0\r\n';
    return `$${body.length}\r\n${body}\r\n`;
  }
  if (command[0] !== 'evalsha' && command[0] !== 'eval') return '+OK\r\n';
  return undefined;
}

async function closedPort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

describe('an unreachable or broken Redis', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0)) await c();
  });

  it('fails with STORE_UNAVAILABLE within the command timeout when nothing listens', async () => {
    const store = new RedisStore({
      url: `redis://127.0.0.1:${await closedPort()}`,
      commandTimeoutMs: 200,
      connectTimeoutMs: 100,
    });
    cleanups.push(() => store.close());
    const { error, ms } = await failure(store.consume(request()));
    expect(error.code).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect(ms).toBeLessThan(1000);
    // Calls keep failing the same way, each within the bound.
    const again = await failure(store.adjust({ key: 'k', limits, delta: 1 }));
    expect(again.error.code).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect((await failure(store.ping())).error.code).toBe(ErrorCodes.STORE_UNAVAILABLE);
  });

  it('fails with STORE_UNAVAILABLE when no cluster node is reachable', async () => {
    const port = await closedPort();
    const store = new RedisStore({ clusterNodes: [`127.0.0.1:${port}`], commandTimeoutMs: 200, connectTimeoutMs: 100 });
    cleanups.push(() => store.close());
    const { error, ms } = await failure(store.consume(request()));
    expect(error.code).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect(ms).toBeLessThan(1000);
  });

  it('fails with STORE_UNAVAILABLE when the server accepts but never becomes ready', async () => {
    const fake = await fakeRedis(() => undefined);
    cleanups.push(() => fake.close());
    const store = new RedisStore({ url: fake.url, commandTimeoutMs: 200, connectTimeoutMs: 5000 });
    cleanups.push(() => store.close());
    const { error, ms } = await failure(store.consume(request()));
    expect(error.code).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect(ms).toBeLessThan(1000);
  });

  it('fails with STORE_TIMEOUT when a ready server stops answering', async () => {
    const fake = await fakeRedis(handshake);
    cleanups.push(() => fake.close());
    const store = new RedisStore({ url: fake.url, commandTimeoutMs: 200 });
    cleanups.push(() => store.close());
    const { error, ms } = await failure(store.consume(request()));
    expect(error.code).toBe(ErrorCodes.STORE_TIMEOUT);
    expect(ms).toBeLessThan(1000);
  });

  it('bounds calls through a client it was given, even one that would queue forever', async () => {
    const fake = await fakeRedis(handshake);
    cleanups.push(() => fake.close());
    const client = new Redis(fake.url);
    cleanups.push(async () => void client.disconnect());
    const store = new RedisStore({ client, commandTimeoutMs: 150 });
    cleanups.push(() => store.close());
    const { error } = await failure(store.consume(request()));
    expect(error.code).toBe(ErrorCodes.STORE_TIMEOUT);
  });

  it('fails with STORE_UNAVAILABLE when the connection drops mid-call', async () => {
    const fake = await fakeRedis((command, socket) => {
      const reply = handshake(command);
      if (reply === undefined) socket.destroy();
      return reply;
    });
    cleanups.push(() => fake.close());
    const store = new RedisStore({ url: fake.url, commandTimeoutMs: 500 });
    cleanups.push(() => store.close());
    const { error } = await failure(store.consume(request()));
    expect(error.code).toBe(ErrorCodes.STORE_UNAVAILABLE);
  });

  it('maps a Redis error reply to STORE_PROTOCOL and a busy server to STORE_UNAVAILABLE', async () => {
    let reply = '-ERR unknown command\r\n';
    const fake = await fakeRedis((command) => handshake(command) ?? reply);
    cleanups.push(() => fake.close());
    const store = new RedisStore({ url: fake.url, commandTimeoutMs: 500 });
    cleanups.push(() => store.close());
    expect((await failure(store.consume(request()))).error.code).toBe(ErrorCodes.STORE_PROTOCOL);
    reply = '-BUSY Redis is busy running a script\r\n';
    expect((await failure(store.consume(request()))).error.code).toBe(ErrorCodes.STORE_UNAVAILABLE);
    reply = ':42\r\n';
    expect((await failure(store.consume(request()))).error.code).toBe(ErrorCodes.STORE_PROTOCOL);
  });
});

describe('input, lifecycle and foreign data', () => {
  const target = standalone('faults');
  const client = new Redis(redisUrl());
  afterAll(async () => {
    client.disconnect();
    await cleanUp(target.admin(), target.prefix);
  });

  it('rejects invalid input with typed errors and sends nothing', async () => {
    const store = new RedisStore({ client, prefix: target.prefix });
    const evalsha = vi.spyOn(client, 'evalsha');
    const concurrencyLimits = compileLimits({ algorithm: 'concurrency', limit: 2 });
    const cases: [Promise<unknown>, string][] = [
      [store.consume({ ...request(), key: 42 as unknown as string }), ErrorCodes.INVALID_KEY],
      [store.consume({ ...request(), key: 'x'.repeat(257) }), ErrorCodes.INVALID_KEY],
      [store.consume({ ...request(), cost: -1 }), ErrorCodes.INVALID_COST],
      [store.consume({ ...request(), cost: 1.5 }), ErrorCodes.INVALID_COST],
      [store.consume({ ...request(), cost: 2e9 }), ErrorCodes.INVALID_COST],
      [store.consume({ ...request(), limits: [] }), ErrorCodes.INVALID_POLICY],
      [store.consume({ ...request(), limits: undefined as unknown as CompiledLimit[] }), ErrorCodes.INVALID_POLICY],
      [store.consume({ ...request(), limits: [{ ...limits[0]!, code: 2 }] }), ErrorCodes.INVALID_POLICY],
      [store.consume({ ...request(), limits: [{ ...limits[0]!, windowMs: 0 }] }), ErrorCodes.INVALID_POLICY],
      [store.consume({ ...request(), limits: [{ id: 'x' } as CompiledLimit] }), ErrorCodes.INVALID_POLICY],
      [store.consume({ ...request(), leaseId: 'l'.repeat(257) }), ErrorCodes.INVALID_OPTIONS],
      [store.adjust({ key: 'k', limits, delta: Number.NaN }), ErrorCodes.INVALID_COST],
      [store.reserve({ key: 'k', limits, min: 3, max: 2 }), ErrorCodes.INVALID_COST],
      [store.reserve({ key: 'k', limits, min: 0, max: 0 }), ErrorCodes.INVALID_COST],
      [store.reserve({ key: 'k', limits: concurrencyLimits, min: 1, max: 2 }), ErrorCodes.INVALID_OPTIONS],
      [store.renew({ key: 'k', limits, leaseId: 'a' }), ErrorCodes.INVALID_OPTIONS],
      [store.release({ key: 'k', limits, leaseId: 'a' }), ErrorCodes.INVALID_OPTIONS],
      [store.renew({ key: 'k', limits: concurrencyLimits, leaseId: 'a', ttlMs: 0 }), ErrorCodes.INVALID_OPTIONS],
    ];
    for (const [promise, code] of cases) expect((await failure(promise)).error.code).toBe(code);
    expect(evalsha).not.toHaveBeenCalled();
    evalsha.mockRestore();
    await store.close();
  });

  it('rejects bad options with INVALID_OPTIONS', () => {
    const bad: unknown[] = [
      {},
      { url: 'http://x' },
      { url: redisUrl(), client },
      { url: redisUrl(), maxBatchSize: 0 },
      { url: redisUrl(), maxBatchSize: 5000 },
      { url: redisUrl(), commandTimeoutMs: 1.5 },
      { url: redisUrl(), prefix: 'p'.repeat(200) },
      { url: redisUrl(), nope: 1 },
      { clusterNodes: [] },
      { clusterNodes: ['localhost'] },
      { client: {} },
    ];
    for (const options of bad) {
      expect(() => new RedisStore(options as never), JSON.stringify(options)).toThrow(
        expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS }),
      );
    }
  });

  it('closes safely twice, finishes accepted calls, then refuses with CLOSED; a given client stays open', async () => {
    const store = new RedisStore({ client, prefix: target.prefix });
    const accepted = store.consume(request('close'));
    const first = store.close();
    const second = store.close();
    expect(second).toBe(first);
    await first;
    expect((await accepted).allowed).toBe(true);
    expect((await failure(store.consume(request('close')))).error.code).toBe(ErrorCodes.CLOSED);
    expect((await failure(store.ping())).error.code).toBe(ErrorCodes.CLOSED);
    expect(client.status).toBe('ready');
    expect(await client.ping()).toBe('PONG');
  });

  it('closes the connection it opened', async () => {
    const store = new RedisStore({ url: redisUrl(), prefix: target.prefix });
    await store.ping();
    await store.close();
    await store.close();
    expect(store.client.status).toBe('end');
  });

  it('refuses a key holding foreign data with STORE_PROTOCOL, deciding the rest of the batch', async () => {
    const store = new RedisStore({ client, prefix: target.prefix });
    await client.set(keyNames(target.prefix, 'garbage').state, 'not msgpack \xff');
    await client.hset(keyNames(target.prefix, 'wrongtype').state, 'f', 'v');
    const [garbage, wrongType, fine] = await Promise.allSettled([
      store.consume(request('garbage')),
      store.consume(request('wrongtype')),
      store.consume(request('fine')),
    ]);
    expect(garbage).toMatchObject({ status: 'rejected', reason: { code: ErrorCodes.STORE_PROTOCOL } });
    expect(wrongType).toMatchObject({ status: 'rejected', reason: { code: ErrorCodes.STORE_PROTOCOL } });
    expect(fine).toMatchObject({ status: 'fulfilled', value: { allowed: true } });
    // The foreign data is left alone.
    expect(await client.hget(keyNames(target.prefix, 'wrongtype').state, 'f')).toBe('v');
    await store.close();
  });

  it('loads the script again after Redis forgot it (NOSCRIPT)', async () => {
    const store = new RedisStore({ client, prefix: target.prefix });
    await store.consume(request('noscript'));
    await client.script('FLUSH');
    const evalCalls = vi.spyOn(client, 'eval');
    const r = await store.consume(request('noscript'));
    expect(r.statuses[0]!.remaining).toBe(8);
    expect(evalCalls).toHaveBeenCalledTimes(1);
    await store.consume(request('noscript'));
    expect(evalCalls).toHaveBeenCalledTimes(1);
    evalCalls.mockRestore();
    await store.close();
  });

  it('the script refuses malformed calls without writing anything', async () => {
    const { sha, source } = batchScriptSource();
    await client.script('LOAD', source);
    const key = keyNames(target.prefix, 'direct');
    const keys = [key.state];
    // One policy (P = 1) of one limit (L = 1): a token bucket of 100 per second; no lease keys.
    const limit = ['1', '100', '1000', '100', '10', '30000', 'tb'];
    const policy = ['1', '1', ...limit, '0'];
    const item = [1, 1, 1, 1, ''];
    // Everything after the lease groups is the items, packed as the store packs them.
    const call = (args: (string | number)[], k = keys, itemsAt = args.length - 5) =>
      client.evalsha(sha, k.length, ...k, ...args.slice(0, itemsAt).map(String), packAny(args.slice(itemsAt)));
    expect(await call(['0', ...policy, ...item])).toEqual([1, expect.stringContaining('protocol')]);
    const concurrency = ['1', '1', '6', '1', '1', '1', '1', '10', 'c'];
    const malformed: [string, (string | number)[], string[]?, number?][] = [
      ['no policy', ['1', '0', '0', ...item]],
      ['no limit', ['1', '1', '0', '0', ...item]],
      [
        'nine limits',
        ['1', '1', '9', ...Array.from({ length: 9 }, (_, i) => [...limit.slice(0, 6), `l${i}`]).flat(), '0', ...item],
      ],
      ['item cut short', ['1', ...policy, 1, 1, 1, 1], keys, policy.length + 1],
      ['unknown op', ['1', ...policy, 9, 1, 1, 1, '']],
      ['no such policy', ['1', ...policy, 1, 2, 1, 1, '']],
      ['no such key group', ['1', ...policy, 1, 1, 2, 1, '']],
      ['negative cost', ['1', ...policy, 1, 1, 1, -1, '']],
      ['fractional cost', ['1', ...policy, 1, 1, 1, 1.5, '']],
      ['cost too large', ['1', ...policy, 1, 1, 1, 2e9, '']],
      ['lease id too long', ['1', ...policy, 1, 1, 1, 1, 'x'.repeat(257)]],
      ['renew without a concurrency limit', ['1', ...policy, 3, 1, 1, 100, 'a']],
      ['reserve with min > max', ['1', ...policy, 5, 1, 1, 2, 3]],
      ['reserve min as a string', ['1', ...policy, 5, 1, 1, 2, '1']],
      ['lease id as a number', ['1', ...policy, 1, 1, 1, 1, 7]],
      ['unknown algorithm', ['1', '1', '1', '7', ...limit.slice(1), '0', ...item]],
      ['zero window', ['1', '1', '1', '1', '100', '0', '100', '10', '30000', 'tb', '0', ...item]],
      ['log limit too big', ['1', '1', '1', '5', '20000', '1000', '1', '1', '30000', 'log', '0', ...item]],
      ['lease ttl too short', ['1', '1', '1', '6', '5', '1000', '5', '10', '9', 'c', '0', ...item]],
      ['id pattern', ['1', '1', '1', ...limit.slice(0, 6), 'bad id!', '0', ...item]],
      [
        'two concurrency limits',
        ['1', '1', '2', '6', '1', '1', '1', '1', '10', 'c1', '6', '1', '1', '1', '1', '10', 'c2', '0', ...item],
      ],
      ['duplicate id', ['1', '1', '2', ...limit, ...limit, '0', ...item]],
      ['leases without lease keys', ['1', ...concurrency, '0', ...item]],
      ['lease keys of no group', ['1', ...concurrency, '1', '2', ...item], [key.state, key.leases, key.costs]],
      ['lease keys missing', ['1', ...concurrency, '1', '1', ...item], [key.state, key.leases]],
    ];
    for (const [why, args, k, at] of malformed) expect(await call(args, k, at), why).toEqual([2, expect.any(String)]);
    expect(await client.evalsha(sha, 1, key.state, '1', ...policy, 'not msgpack')).toEqual([
      2,
      expect.stringContaining('MessagePack'),
    ]);
    expect(await client.evalsha(sha, 1, key.state, '1', ...policy, packAny([]), packAny([1, 1, 1, 1, '']))).toEqual([
      2,
      expect.stringContaining('last'),
    ]);
    expect(await client.exists(key.state, key.leases, key.costs)).toBe(0);
    // The same calls, well formed, are applied.
    expect(await call(['1', ...policy, ...item])).toEqual([0, expect.any(String), 1, 1, 99, 0, 10]);
    expect(await call(['1', ...concurrency, '1', '1', 1, 1, 1, 1, 'l'], [key.state, key.leases, key.costs])).toEqual([
      0,
      expect.any(String),
      1,
      1,
      0,
      0,
      10,
    ]);
    expect(await client.exists(key.state, key.leases, key.costs)).toBe(3);
  });
});
