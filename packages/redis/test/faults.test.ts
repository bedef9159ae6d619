/**
 * What the store does when Redis is unreachable, slow, or holds foreign data, and with bad
 * input: always a typed error within its time bound, never a hang.
 */
import { once } from 'node:events';
import { createServer, type Socket } from 'node:net';
import { DEFAULT_BOOKING, ErrorCodes, SluiceError, compileLimits, type CompiledLimit } from '@sluice/core';
import { Redis } from 'ioredis';
import { RedisPeerRegistry, RedisStore, batchScriptSource, keyNames } from '../src/index.js';
import { PROTOCOL_VERSION, ScriptCodes } from '../src/codes.js';
import { MAX_STORAGE_KEY_LENGTH } from '../src/validate.js';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { redisUrl } from '../../../test/env.js';
import { TEST_COMMAND_TIMEOUT_MS, cleanUp, standalone } from './helpers.js';
import { packAny } from './msgpack.js';

const limits = compileLimits({ algorithm: 'token-bucket', limit: 10, windowMs: 60_000 });
const request = (key = 'k') => ({ key, limits, cost: 1, permitId: '' });

/**
 * The bound the tests below check a failing call against. Far above the 200 ms call bound they
 * set (a loaded machine stalls for a second or more), and far below what an unbounded call
 * would take: a connect timeout they set to a minute, or never.
 */
const FAILS_WITHIN_MS = 10_000;

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

const SCRIPT_COMMANDS = new Set(['fcall', 'function', 'evalsha', 'eval']);

/** Answers what ioredis asks while connecting, so the connection becomes ready. */
function handshake(command: string[]): string | undefined {
  if (command[0] === 'info') {
    const body = '# Server\r\nredis_version:7.0.0\r\nloading:0\r\n';
    return `$${body.length}\r\n${body}\r\n`;
  }
  if (!SCRIPT_COMMANDS.has(command[0]!)) return '+OK\r\n';
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
    expect(ms).toBeLessThan(FAILS_WITHIN_MS);
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
    expect(ms).toBeLessThan(FAILS_WITHIN_MS);
  });

  it('fails with STORE_UNAVAILABLE when the server accepts but never becomes ready', async () => {
    const fake = await fakeRedis(() => undefined);
    cleanups.push(() => fake.close());
    const store = new RedisStore({ url: fake.url, commandTimeoutMs: 200, connectTimeoutMs: 60_000 });
    cleanups.push(() => store.close());
    const { error, ms } = await failure(store.consume(request()));
    expect(error.code).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect(ms).toBeLessThan(FAILS_WITHIN_MS);
  });

  it('fails with STORE_TIMEOUT when a ready server stops answering', async () => {
    const fake = await fakeRedis(handshake);
    cleanups.push(() => fake.close());
    const store = new RedisStore({ url: fake.url, commandTimeoutMs: 200 });
    cleanups.push(() => store.close());
    const { error, ms } = await failure(store.consume(request()));
    expect(error.code).toBe(ErrorCodes.STORE_TIMEOUT);
    expect(ms).toBeLessThan(FAILS_WITHIN_MS);
  });

  it('closes within its bound when a ready server stops answering: its peer heartbeat is bounded too', async () => {
    // The store's own connection has no ioredis command timeout (the store bounds what it
    // sends), so the registry's heartbeat, pending on the silent server, must bound itself or
    // close() would wait for it forever.
    const fake = await fakeRedis(handshake);
    cleanups.push(() => fake.close());
    const store = new RedisStore({ url: fake.url, commandTimeoutMs: 200 });
    const { error } = await failure(store.consume(request()));
    expect(error.code).toBe(ErrorCodes.STORE_TIMEOUT);
    const started = performance.now();
    await store.close();
    expect(performance.now() - started).toBeLessThan(FAILS_WITHIN_MS);
    expect(store.peers!.known).toBe(false);
  });

  it("fails a peer heartbeat the server never answers within the registry's own bound", async () => {
    const fake = await fakeRedis(handshake);
    cleanups.push(() => fake.close());
    const client = new Redis(fake.url, { maxRetriesPerRequest: 0 });
    cleanups.push(async () => void client.disconnect());
    const registry = new RedisPeerRegistry({ client, heartbeatMs: 1000, timeoutMs: 150 });
    const { error, ms } = await failure(registry.start());
    expect(error.code).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect(ms).toBeLessThan(FAILS_WITHIN_MS);
    await registry.close();
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

/** Bookings with bad input: each must fail with its typed error before anything is sent. */
function bookingCases(store: RedisStore, concurrencyLimits: readonly CompiledLimit[]): [Promise<unknown>, string][] {
  const token = 'a-token-of-16-chars';
  const book = { key: 'k', limits, cost: 1, id: 'b', token, create: true, bounds: DEFAULT_BOOKING };
  const bounds = (b: object) => ({ ...book, bounds: { ...DEFAULT_BOOKING, ...b } });
  return [
    [store.book({ ...book, key: 42 as unknown as string }), ErrorCodes.INVALID_KEY],
    [store.book({ ...book, limits: [] }), ErrorCodes.INVALID_POLICY],
    [store.book({ ...book, limits: concurrencyLimits }), ErrorCodes.INVALID_OPTIONS],
    [store.book({ ...book, cost: -1 }), ErrorCodes.INVALID_COST],
    [store.book({ ...book, cost: 0.5 }), ErrorCodes.INVALID_COST],
    [store.book({ ...book, id: '' }), ErrorCodes.INVALID_OPTIONS],
    [store.book({ ...book, id: 'a b' }), ErrorCodes.INVALID_OPTIONS],
    [store.book({ ...book, id: 'é' }), ErrorCodes.INVALID_OPTIONS],
    [store.book({ ...book, id: 'x'.repeat(129) }), ErrorCodes.INVALID_OPTIONS],
    [store.book({ ...book, id: 7 as unknown as string }), ErrorCodes.INVALID_OPTIONS],
    [store.book({ ...book, create: 1 as unknown as boolean }), ErrorCodes.INVALID_OPTIONS],
    [store.book({ ...book, bounds: undefined as unknown as typeof DEFAULT_BOOKING }), ErrorCodes.INVALID_OPTIONS],
    [store.book(bounds({ maxAheadMs: 0 })), ErrorCodes.INVALID_OPTIONS],
    [store.book(bounds({ maxAheadMs: 3_600_001 })), ErrorCodes.INVALID_OPTIONS],
    [store.book(bounds({ claimWindowMs: 60_001 })), ErrorCodes.INVALID_OPTIONS],
    [store.book(bounds({ maxBookings: 1.5 })), ErrorCodes.INVALID_OPTIONS],
    [store.book(bounds({ maxBookings: 10_001 })), ErrorCodes.INVALID_OPTIONS],
    [store.book(bounds({ maxShare: 0 })), ErrorCodes.INVALID_OPTIONS],
    [store.book(bounds({ maxShare: 1.01 })), ErrorCodes.INVALID_OPTIONS],
    [store.book({ ...book, token: 'short' }), ErrorCodes.INVALID_OPTIONS],
    [store.book({ ...book, token: 'has a space, long enough' }), ErrorCodes.INVALID_OPTIONS],
    [store.cancel({ key: 'k', limits: concurrencyLimits, id: 'b', token }), ErrorCodes.INVALID_OPTIONS],
    [store.cancel({ key: 'k', limits, id: 'x'.repeat(129), token }), ErrorCodes.INVALID_OPTIONS],
    [store.cancel({ key: 'k', limits, id: 'b', token: 'x'.repeat(129) }), ErrorCodes.INVALID_OPTIONS],
    [store.cancel({ key: 'k', limits: [], id: 'b', token }), ErrorCodes.INVALID_POLICY],
  ];
}

describe('input, lifecycle and foreign data', () => {
  const target = standalone('faults');
  const client = new Redis(redisUrl());
  afterAll(async () => {
    client.disconnect();
    await cleanUp(target.admin(), target.prefix);
  });

  it('rejects invalid input with typed errors and sends nothing', async () => {
    const store = new RedisStore({ client, prefix: target.prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
    const fcall = vi.spyOn(client, 'fcall');
    const evalsha = vi.spyOn(client, 'evalsha');
    const concurrencyLimits = compileLimits({ algorithm: 'concurrency', limit: 2 });
    const cases: [Promise<unknown>, string][] = [
      [store.consume({ ...request(), key: 42 as unknown as string }), ErrorCodes.INVALID_KEY],
      [store.consume({ ...request(), key: 'x'.repeat(MAX_STORAGE_KEY_LENGTH + 1) }), ErrorCodes.INVALID_KEY],
      [store.consume({ ...request(), cost: -1 }), ErrorCodes.INVALID_COST],
      [store.consume({ ...request(), cost: 1.5 }), ErrorCodes.INVALID_COST],
      [store.consume({ ...request(), cost: 2e9 }), ErrorCodes.INVALID_COST],
      [store.consume({ ...request(), limits: [] }), ErrorCodes.INVALID_POLICY],
      [store.consume({ ...request(), limits: undefined as unknown as CompiledLimit[] }), ErrorCodes.INVALID_POLICY],
      [store.consume({ ...request(), limits: [{ ...limits[0]!, code: 2 }] }), ErrorCodes.INVALID_POLICY],
      [store.consume({ ...request(), limits: [{ ...limits[0]!, windowMs: 0 }] }), ErrorCodes.INVALID_POLICY],
      [store.consume({ ...request(), limits: [{ id: 'x' } as CompiledLimit] }), ErrorCodes.INVALID_POLICY],
      [store.consume({ ...request(), permitId: 'l'.repeat(257) }), ErrorCodes.INVALID_OPTIONS],
      [store.consume({ ...request(), coreShare: 0.95 }), ErrorCodes.INVALID_OPTIONS],
      [store.consume({ ...request(), coreShare: Number.NaN }), ErrorCodes.INVALID_OPTIONS],
      [store.adjust({ key: 'k', limits, delta: Number.NaN }), ErrorCodes.INVALID_COST],
      [store.reserve({ key: 'k', limits, min: 3, max: 2 }), ErrorCodes.INVALID_COST],
      [store.reserve({ key: 'k', limits, min: 0, max: 0 }), ErrorCodes.INVALID_COST],
      [store.reserve({ key: 'k', limits, min: 1, max: 2, holdMs: 60_001 }), ErrorCodes.INVALID_OPTIONS],
      [store.reserve({ key: 'k', limits, min: 1, max: 2, holdMs: 0.5 }), ErrorCodes.INVALID_OPTIONS],
      [store.adjust({ key: 'k', limits, delta: -1, at: -1 }), ErrorCodes.INVALID_OPTIONS],
      [store.reserve({ key: 'k', limits: concurrencyLimits, min: 1, max: 2 }), ErrorCodes.INVALID_OPTIONS],
      [store.renew({ key: 'k', limits, permitId: 'a' }), ErrorCodes.INVALID_OPTIONS],
      [store.release({ key: 'k', limits, permitId: 'a' }), ErrorCodes.INVALID_OPTIONS],
      [store.renew({ key: 'k', limits: concurrencyLimits, permitId: 'a', ttlMs: 0 }), ErrorCodes.INVALID_OPTIONS],
      ...bookingCases(store, concurrencyLimits),
    ];
    for (const [promise, code] of cases) expect((await failure(promise)).error.code).toBe(code);
    expect(fcall).not.toHaveBeenCalled();
    expect(evalsha).not.toHaveBeenCalled();
    fcall.mockRestore();
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
    const store = new RedisStore({ client, prefix: target.prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
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
    const store = new RedisStore({ url: redisUrl(), prefix: target.prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
    await store.ping();
    await store.close();
    await store.close();
    expect(store.client.status).toBe('end');
  });

  it('refuses a key holding foreign data with STORE_PROTOCOL, deciding the rest of the batch', async () => {
    const store = new RedisStore({ client, prefix: target.prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
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

  it('loads the function again after Redis lost it, once for every call that missed it', async () => {
    const store = new RedisStore({ client, prefix: target.prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS, maxBatchSize: 10 });
    await store.consume(request('lost'));
    await client.function('FLUSH');
    const calls = vi.spyOn(client, 'call');
    const loads = () => calls.mock.calls.filter((c) => c[0] === 'FUNCTION' && c[1] === 'LOAD').length;
    // Twenty calls on one key in one tick go as four script calls (see RedisStore#chunks): all
    // four miss, and each is sent again once the library is back.
    const fcalls = vi.spyOn(client, 'fcall');
    const results = await Promise.all(Array.from({ length: 20 }, () => store.consume(request('lost'))));
    expect(fcalls.mock.calls.length).toBe(8);
    expect(results.map((r) => r.statuses[0]!.remaining)).toEqual(
      Array.from({ length: 20 }, (_, i) => 8 - i).map((r) => Math.max(r, 0)),
    );
    expect(loads()).toBe(1);
    await store.consume(request('lost'));
    expect(loads()).toBe(1);
    fcalls.mockRestore();
    calls.mockRestore();
    await store.close();
  });

  it('falls back to EVALSHA on a Redis without functions, and sends the script again after SCRIPT FLUSH', async () => {
    const old = new Redis(redisUrl());
    // Start with the scripts cached (the batch's, and its lean entry's that a lone consume is
    // sent to), whatever ran before on this server.
    const { source, more } = batchScriptSource();
    await old.script('LOAD', source);
    await old.script('LOAD', more.consume_one!.source);
    const fcall = vi
      .spyOn(old, 'fcall')
      .mockRejectedValue(
        Object.assign(new Error("ERR unknown command 'fcall', with args beginning with: "), { name: 'ReplyError' }),
      );
    const evalsha = vi.spyOn(old, 'evalsha');
    const evalCalls = vi.spyOn(old, 'eval');
    // Only the batch script's calls are counted here: no peer registry on this connection.
    const store = new RedisStore({
      client: old,
      prefix: target.prefix,
      peerRegistry: false,
      commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS,
    });
    try {
      expect((await store.consume(request('old'))).statuses[0]!.remaining).toBe(9);
      expect((await store.consume(request('old'))).statuses[0]!.remaining).toBe(8);
      // Found out once per connection.
      expect(fcall).toHaveBeenCalledTimes(1);
      expect(evalsha).toHaveBeenCalledTimes(2);
      await old.script('FLUSH');
      expect((await store.consume(request('old'))).statuses[0]!.remaining).toBe(7);
      expect(evalCalls).toHaveBeenCalledTimes(1);
      expect((await store.consume(request('old'))).statuses[0]!.remaining).toBe(6);
      expect(evalCalls).toHaveBeenCalledTimes(1);
      // Two calls at once go as one batch: its script was flushed too.
      const both = await Promise.all([store.consume(request('old')), store.consume(request('old'))]);
      expect(both.map((r) => r.statuses[0]!.remaining)).toEqual([5, 4]);
      expect(evalCalls).toHaveBeenCalledTimes(2);
      expect(evalsha).toHaveBeenCalledTimes(5);
      expect(fcall).toHaveBeenCalledTimes(1);
    } finally {
      await store.close();
      old.disconnect();
    }
  });

  it('the program refuses malformed calls without writing anything, as a function and as a script', async () => {
    const { sha, source, library, functionName, more } = batchScriptSource();
    const lean = more.consume_one!;
    await client.script('LOAD', source);
    await client.script('LOAD', lean.source);
    await client.call('FUNCTION', 'LOAD', 'REPLACE', library);
    const key = keyNames(target.prefix, 'direct');
    const keys = [key.state];
    const v = PROTOCOL_VERSION;
    // One policy (P = 1) of one limit: a token bucket of 100 an hour (nothing refills between the
    // calls, however slow the machine); no permit keys (C = 0).
    const limit = ['1', '100', '3600000', '100', '10', '30000', 'tb'];
    const one = (...limits: string[][]) => limits.map((l) => l.join(',')).join(',');
    const policy = ['1', one(limit), '0'];
    const item = [1, 1, 1, 1, '', 0];
    const w = item.length;
    const forms = {
      function: (k: string[], args: (string | Buffer)[]) => client.fcall(functionName, k.length, ...k, ...args),
      script: (k: string[], args: (string | Buffer)[]) => client.evalsha(sha, k.length, ...k, ...args),
    };
    // The lean entry for a one-limit consume alone: policy, cost.
    const leanForms = {
      function: (k: string[], args: string[]) => client.fcall(lean.functionName, k.length, ...k, ...args),
      script: (k: string[], args: string[]) => client.evalsha(lean.sha, k.length, ...k, ...args),
    };
    // Everything after the permit groups is the items, packed as the store packs them.
    const call = (form: keyof typeof forms, args: (string | number)[], k = keys, itemsAt = args.length - w) =>
      forms[form](k, [...args.slice(0, itemsAt).map(String), packAny(args.slice(itemsAt))]);
    const concurrency = ['1', '6,1,1,1,1,10,c'];
    const malformed: [string, (string | number)[], string[]?, number?][] = [
      ['no policy', [v, '0', '0', ...item]],
      ['empty policy', [v, '1', '', '0', ...item]],
      ['limit cut short', [v, '1', one(limit.slice(0, 6)), '0', ...item]],
      ['an empty field', [v, '1', one(limit).replace('100,', ','), '0', ...item]],
      ['nine limits', [v, '1', one(...Array.from({ length: 9 }, (_, i) => [...limit.slice(0, 6), `l${i}`])), '0', ...item]],
      ['policy too long', [v, '1', one([...limit.slice(0, 6), 'x'.repeat(1100)]), '0', ...item]],
      ['item cut short', [v, ...policy, 1, 1, 1, 1], keys, policy.length + 1],
      ['five values, as protocol 1 sent', [v, ...policy, 1, 1, 1, 1, ''], keys, policy.length + 1],
      ['unknown op', [v, ...policy, 9, 1, 1, 1, '', 0]],
      ['no such policy', [v, ...policy, 1, 2, 1, 1, '', 0]],
      ['no such key group', [v, ...policy, 1, 1, 2, 1, '', 0]],
      ['negative cost', [v, ...policy, 1, 1, 1, -1, '', 0]],
      ['fractional cost', [v, ...policy, 1, 1, 1, 1.5, '', 0]],
      ['cost too large', [v, ...policy, 1, 1, 1, 2e9, '', 0]],
      ['permit id too long', [v, ...policy, 1, 1, 1, 1, 'x'.repeat(257), 0]],
      ['renew without a concurrency limit', [v, ...policy, 3, 1, 1, 100, 'a', 0]],
      ['reserve with min > max', [v, ...policy, 5, 1, 1, 2, 3, 0]],
      ['reserve min as a string', [v, ...policy, 5, 1, 1, 2, '1', 0]],
      ['permit id as a number', [v, ...policy, 1, 1, 1, 1, 7, 0]],
      ['negative reserve', [v, ...policy, 1, 1, 1, 1, '', -0.1]],
      ['reserve above 0.9', [v, ...policy, 1, 1, 1, 1, '', 0.95]],
      ['reserve as a string', [v, ...policy, 1, 1, 1, 1, '', '0.5']],
      ['negative stamp on an adjust', [v, ...policy, 2, 1, 1, 1, '', -0.5]],
      ['stamp past 1e15 on an adjust', [v, ...policy, 2, 1, 1, 1, '', 2e15]],
      ['fractional hold on a reservation', [v, ...policy, 5, 1, 1, 2, 1, 0.5]],
      ['hold above 60 s', [v, ...policy, 5, 1, 1, 2, 1, 60_001]],
      ['negative hold', [v, ...policy, 5, 1, 1, 2, 1, -1]],
      ['unknown algorithm', [v, '1', one(['7', ...limit.slice(1)]), '0', ...item]],
      ['zero window', [v, '1', '1,100,0,100,10,30000,tb', '0', ...item]],
      ['log limit too big', [v, '1', '5,20000,1000,1,1,30000,log', '0', ...item]],
      ['permit ttl too short', [v, '1', '6,5,1000,5,10,9,c', '0', ...item]],
      ['id pattern', [v, '1', one([...limit.slice(0, 6), 'bad id!']), '0', ...item]],
      ['two concurrency limits', [v, '1', '6,1,1,1,1,10,c1,6,1,1,1,1,10,c2', '0', ...item]],
      ['duplicate id', [v, '1', one(limit, limit), '0', ...item]],
      ['one-limit consume of a sliding window', [v, '1', '3,100,1000,100,10,30000,sw', '0', 6, 1, 1, 1], keys, 4],
      ['one-limit consume of two limits', [v, '1', one(limit, [...limit.slice(0, 6), 'b']), '0', 6, 1, 1, 1], keys, 4],
      ['one-limit consume cut short', [v, ...policy, 6, 1, 1], keys, policy.length + 1],
      ['one-limit consume of a fractional cost', [v, ...policy, 6, 1, 1, 0.5], keys, policy.length + 1],
      ['permits without permit keys', [v, ...concurrency, '0', ...item]],
      ['permit keys of no group', [v, ...concurrency, '1', '2', ...item], [key.state, key.permits, key.costs]],
      ['permit keys missing', [v, ...concurrency, '1', '1', ...item], [key.state, key.permits]],
      ...bookingItems(v, policy),
    ];
    for (const form of ['function', 'script'] as const) {
      expect(await call(form, ['1', ...policy, ...item]), form).toEqual([1, expect.stringContaining('protocol')]);
      for (const [why, args, k, at] of malformed)
        expect(await call(form, args, k, at), `${form}: ${why}`).toEqual([2, expect.any(String)]);
      expect(await forms[form](keys, [v, ...policy, 'not msgpack'])).toEqual([2, expect.stringContaining('MessagePack')]);
      // The batch entry takes its items as a MessagePack array only.
      expect(await forms[form](keys, [v, ...policy, '6,1,1,1'])).toEqual([2, expect.stringContaining('MessagePack')]);
      // The lean entry: one key, a policy of one token bucket, GCRA or fixed window, a decimal cost.
      const text = one(limit);
      const leanMalformed: [string, string[], string[]?][] = [
        ['no arguments', []],
        ['no cost', [text]],
        ['a third argument', [text, '1', '1']],
        ['cost not a number', [text, 'x']],
        ['negative cost', [text, '-1']],
        ['fractional cost', [text, '1.5']],
        ['cost in exponent form', [text, '1e3']],
        ['cost with a space', [text, ' 1']],
        ['cost too large', [text, '2000000000']],
        ['empty policy', ['', '1']],
        ['policy cut short', [one(limit.slice(0, 6)), '1']],
        ['a sliding window', ['3,100,1000,100,10,30000,sw', '1']],
        ['two limits', [one(limit, [...limit.slice(0, 6), 'b']), '1']],
        ['a concurrency limit', ['6,1,1,1,1,10,c', '1']],
        ['two keys', [text, '1'], [key.state, key.permits]],
        ['no key', [text, '1'], []],
      ];
      for (const [why, args, k = keys] of leanMalformed)
        expect(await leanForms[form](k, args), `${form} consume_one: ${why}`).toEqual([2, expect.any(String)]);
      expect(await forms[form](keys, [v, ...policy, packAny([]), packAny(item)])).toEqual([2, expect.stringContaining('last')]);
    }
    // Only rate limits can be booked: refused as an item, the rest of the call decided.
    for (const form of ['function', 'script'] as const) {
      const refused = [
        v,
        ...concurrency,
        '0',
        8,
        1,
        1,
        0,
        'b',
        0,
        'a-token-of-16-chars',
        7,
        1,
        1,
        1,
        'b',
        1,
        1000,
        100,
        10,
        50,
        'a-token-of-16-chars',
      ];
      expect(await call(form, refused, keys, concurrency.length + 2), form).toEqual([
        0,
        expect.any(String),
        expect.any(String),
        ScriptCodes.ERR_NOT_BOOKABLE,
        ScriptCodes.ERR_NOT_BOOKABLE,
      ]);
    }
    expect(await client.exists(key.state, key.permits, key.costs)).toBe(0);
    // The same calls, well formed, are applied: the same program either way.
    expect(await call('function', [v, ...policy, ...item])).toEqual([
      0,
      expect.any(String),
      expect.any(String),
      1,
      1,
      99,
      0,
      36000,
    ]);
    expect(await call('script', [v, ...policy, ...item])).toEqual([
      0,
      expect.any(String),
      expect.any(String),
      1,
      1,
      98,
      0,
      expect.any(Number),
    ]);
    // A one-limit consume answers in short: allowed, remaining, reset (97 left after three).
    expect(await call('function', [v, ...policy, 6, 1, 1, 1], keys, policy.length + 1)).toEqual([
      0,
      expect.any(String),
      expect.any(String),
      1,
      97,
      expect.any(Number),
    ]);
    // The same through the lean entry a lone one is sent to, as a function and as a script (of
    // cost 0: nothing charged).
    for (const form of ['function', 'script'] as const) {
      expect(await leanForms[form](keys, [one(limit), '0']), form).toEqual([
        0,
        expect.any(String),
        expect.any(String),
        1,
        97,
        expect.any(Number),
      ]);
    }
    // A reserve of 0.5 holds back 50 of the 100: 96 - 50 are left to this caller.
    const reserved = [v, ...policy, 1, 1, 1, 1, '', 0.5];
    expect(await call('function', reserved)).toEqual([
      0,
      expect.any(String),
      expect.any(String),
      1,
      1,
      46,
      0,
      expect.any(Number),
    ]);
    // A booking on a key with room admits (outcome 0) with a consume's statuses; a cancel of a
    // booking not held answers 0.
    const booking = [7, 1, 1, 1, 'b', 1, 1000, 100, 10, 50, 'a-token-of-16-chars', 8, 1, 1, 0, 'b', 0, 'a-token-of-16-chars'];
    expect(await call('function', [v, ...policy, ...booking], keys, policy.length + 1)).toEqual([
      0,
      expect.any(String),
      expect.any(String),
      0,
      1,
      95,
      0,
      expect.any(Number),
      0,
    ]);
    const withPermits = [key.state, key.permits, key.costs];
    expect(await call('function', [v, ...concurrency, '1', '1', 1, 1, 1, 1, 'l', 0], withPermits)).toEqual([
      0,
      expect.any(String),
      expect.any(String),
      1,
      1,
      0,
      0,
      10,
    ]);
    expect(await client.exists(key.state, key.permits, key.costs)).toBe(3);
  });
});

/**
 * Malformed bookings (op 7, eleven values) and cancels (op 8, seven), each refused whole with
 * ERR_BAD_ARGUMENT: [why, the call's arguments, its keys (the default), where its items start].
 */
function bookingItems(v: string, policy: string[]): [string, (string | number)[], undefined, number][] {
  const at = policy.length + 1;
  const book = [7, 1, 1, 1, 'b', 1, 1000, 100, 10, 50, 'a-token-of-16-chars'];
  const cancel = [8, 1, 1, 0, 'b', 0, 'a-token-of-16-chars'];
  const with_ = (item: (string | number)[], i: number, value: string | number) => item.map((x, j) => (j === i ? value : x));
  const cases: [string, (string | number)[]][] = [
    ['booking cut short', book.slice(0, 10)],
    ['booking of no such policy', with_(book, 1, 2)],
    ['booking of no such key group', with_(book, 2, 2)],
    ['booking of a negative cost', with_(book, 3, -1)],
    ['booking of a fractional cost', with_(book, 3, 1.5)],
    ['booking of a cost too large', with_(book, 3, 2e9)],
    ['booking id empty', with_(book, 4, '')],
    ['booking id with a space', with_(book, 4, 'a b')],
    ['booking id not ASCII', with_(book, 4, 'é')],
    ['booking id too long', with_(book, 4, 'x'.repeat(129))],
    ['booking id as a number', with_(book, 4, 7)],
    ['create neither 0 nor 1', with_(book, 5, 2)],
    ['create as a string', with_(book, 5, '1')],
    ['max_ahead_ms of 0', with_(book, 6, 0)],
    ['max_ahead_ms above an hour', with_(book, 6, 3_600_001)],
    ['fractional max_ahead_ms', with_(book, 6, 1.5)],
    ['claim_window_ms of 0', with_(book, 7, 0)],
    ['claim_window_ms above a minute', with_(book, 7, 60_001)],
    ['max_bookings of 0', with_(book, 8, 0)],
    ['max_bookings above 10000', with_(book, 8, 10_001)],
    ['max_booked negative', with_(book, 9, -1)],
    ['max_booked fractional', with_(book, 9, 0.5)],
    ['booking token too short', with_(book, 10, 'short')],
    ['booking token with a space', with_(book, 10, 'a token with spaces')],
    ['booking token too long', with_(book, 10, 'x'.repeat(129))],
    ['booking token as a number', with_(book, 10, 1234567890123456)],
    ['a booking in nine values (protocol 4)', book.slice(0, 9)],
    ['a booking in six values', book.slice(0, 6)],
    ['cancel cut short', cancel.slice(0, 6)],
    ['cancel token too short', with_(cancel, 6, 'short')],
    ['cancel with an amount', with_(cancel, 3, 1)],
    ['cancel with a sixth value', with_(cancel, 5, 1)],
    ['cancel id too long', with_(cancel, 4, 'x'.repeat(129))],
    ['cancel id empty', with_(cancel, 4, '')],
    ['cancel of no such key group', with_(cancel, 2, 2)],
  ];
  return cases.map(([why, item]) => [why, [v, ...policy, ...item], undefined, at]);
}
