/** The Redis kit the rule store and the stream package share, against a real Redis. */
import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { evalScript, isReply, isReplyError, plainScript, resignLeadership, takeLeadership } from '../src/kit.js';
import { randomPrefix, redisUrl } from '../../../test/env.js';

describe('the Redis kit', () => {
  const client = new Redis(redisUrl(), { lazyConnect: true });
  const key = `${randomPrefix('kit')}k`;
  const lead = `${randomPrefix('kit')}lead`;
  afterAll(async () => {
    await client.del(key, lead);
    client.disconnect();
  });

  it('names a script by the SHA1 of its text', () => {
    const source = "return redis.call('INCR', KEYS[1])";
    expect(plainScript(source).sha).toBe(createHash('sha1').update(source).digest('hex'));
  });

  it('runs a script by EVALSHA, and by EVAL where the server has not cached it', async () => {
    const script = plainScript(`return redis.call('INCRBY', KEYS[1], ARGV[1]) -- ${key}`);
    await client.script('FLUSH');
    expect(await evalScript(client, script, [key], [2])).toBe(2);
    // Cached by that EVAL: the next call goes by EVALSHA alone.
    expect(await client.script('EXISTS', script.sha)).toEqual([1]);
    expect(await evalScript(client, script, [key], ['3'])).toBe(5);
  });

  it('passes other error replies on, and tells them apart', async () => {
    const failing = plainScript("return redis.error_reply('WRONGTYPE not a counter')");
    const err = await evalScript(client, failing, [key], []).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isReplyError(err)).toBe(true);
    expect(isReply(err, 'WRONGTYPE')).toBe(true);
    expect(isReply(err, 'NOSCRIPT')).toBe(false);
    expect(isReplyError(new Error('connection lost'))).toBe(false);
  });

  it('gives a leadership to one owner at a time: renewed by it, resigned only by it, free once its time ends', async () => {
    // Times far longer than any round trip on a busy machine, but for the one that must run out.
    expect(await takeLeadership(client, lead, 'a', 60_000)).toBe(true);
    expect(await takeLeadership(client, lead, 'b', 60_000)).toBe(false);
    expect(await takeLeadership(client, lead, 'a', 60_000)).toBe(true);
    expect(await resignLeadership(client, lead, 'b')).toBe(false);
    expect(await client.get(lead)).toBe('a');
    expect(await resignLeadership(client, lead, 'a')).toBe(true);
    expect(await takeLeadership(client, lead, 'b', 200.4)).toBe(true);
    expect(await client.pttl(lead)).toBeLessThanOrEqual(201);
    await vi.waitFor(async () => expect(await takeLeadership(client, lead, 'a', 60_000)).toBe(true), {
      timeout: 10_000,
      interval: 50,
    });
    await expect(takeLeadership(client, lead, 'x'.repeat(129), 1000)).rejects.toThrow(/refused its arguments/);
  });
});
