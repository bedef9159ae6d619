/**
 * What every Sluice package that talks to Redis shares (`@sluice/redis/kit`): telling Redis'
 * error replies apart, and running a plain Lua script by EVALSHA with the EVAL fallback in one
 * place. Loads nothing but `node:crypto`: the rule store and the stream package use it without
 * the limit store.
 *
 * @example
 * const script = plainScript(readFileSync(new URL('./apply.lua', import.meta.url), 'utf8'));
 * const reply = await evalScript(client, script, [key], ['1']);
 */
import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';

/** True for an error reply of the Redis server (as opposed to a connection or client fault). */
export function isReplyError(error: unknown): error is Error {
  return error instanceof Error && error.name === 'ReplyError';
}

/** True for an error reply whose message starts with `prefix` (e.g. `NOSCRIPT`, `WRONGTYPE`). */
export function isReply(error: unknown, prefix: string): error is Error {
  return isReplyError(error) && error.message.startsWith(prefix);
}

/** A Lua script run by EVALSHA: its text and its SHA1 (computed, never written down). */
export interface PlainScript {
  readonly source: string;
  readonly sha: string;
}

/** The script of `source`, with its SHA1. */
export function plainScript(source: string): PlainScript {
  return Object.freeze({ source, sha: createHash('sha1').update(source).digest('hex') });
}

/**
 * Runs `script` by EVALSHA; a server that does not have it cached (a restart, SCRIPT FLUSH, a
 * new Cluster node) gets it by EVAL, which also caches it. Rejects with what ioredis rejected.
 */
export async function evalScript(
  client: Redis | Cluster,
  script: PlainScript,
  keys: readonly string[],
  args: readonly (string | Buffer | number)[],
): Promise<unknown> {
  try {
    return await client.evalsha(script.sha, keys.length, ...keys, ...args);
  } catch (error) {
    if (!isReply(error, 'NOSCRIPT')) throw error;
    return client.eval(script.source, keys.length, ...keys, ...args);
  }
}
