import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Cluster, Redis } from 'ioredis';
import { PROTOCOL_VERSION } from './codes.js';
import { isNoScript } from './errors.js';

/** A Lua script ready to send: its source with every include resolved, and its SHA1. */
export interface LuaScript {
  /** Versioned name, for logs and metrics: the script's file and protocol version. */
  readonly name: string;
  readonly source: string;
  readonly sha: string;
}

const INCLUDE = /^--@include "([^"]+)"\s*$/;

/**
 * Reads a Lua file and replaces each `--@include "path"` line (relative to the including file)
 * by that file's text, recursively. Each file is included once, where it is first named, so
 * shared pieces live in one file, are never pasted, and mutual includes cannot loop.
 */
export function resolveIncludes(file: string, read: (path: string) => string = (p) => readFileSync(p, 'utf8')): string {
  const root = dirname(file);
  const seen = new Set<string>();
  const expand = (path: string): string => {
    seen.add(path);
    return read(path)
      .split('\n')
      .map((line) => {
        const match = INCLUDE.exec(line);
        if (!match) return line;
        const target = join(dirname(path), match[1]!);
        if (seen.has(target)) return `-- (${match[1]} already included)`;
        return `-- begin ${relative(root, target)}\n${expand(target)}\n-- end ${relative(root, target)}`;
      })
      .join('\n');
  };
  return expand(file);
}

/** Loads a script from `lua/` (a sibling of both `src/` and `dist/`). */
export function loadScript(file: string): LuaScript {
  const path = fileURLToPath(new URL(`../lua/${file}`, import.meta.url));
  const source = resolveIncludes(path);
  return Object.freeze({
    name: `sluice:${file.replace(/\.lua$/, '')}:v${PROTOCOL_VERSION}`,
    source,
    sha: createHash('sha1').update(source).digest('hex'),
  });
}

let batchScript: LuaScript | undefined;

/** The batch script (`lua/batch.lua`), loaded on first use. */
export function batchScriptSource(): LuaScript {
  batchScript ??= loadScript('batch.lua');
  return batchScript;
}

/** One script call: its keys and arguments. */
export interface ScriptCall {
  readonly keys: readonly string[];
  readonly args: readonly (string | Buffer)[];
}

/** The outcome of one call: its reply, or what ioredis rejected it with. */
export type Settled = { readonly ok: true; readonly reply: unknown } | { readonly ok: false; readonly error: unknown };

/**
 * Runs `calls` of `script`, pipelined when `pipeline` is set (every call then goes to the same
 * server), each by EVALSHA; calls that fail because the server does not have the script cached
 * (a restart, a failover, a new node) are sent again by EVAL, which caches it. This is the only
 * place that knows about NOSCRIPT.
 *
 * An ioredis pipeline settles only when all its replies are in; unpipelined calls on one
 * connection are still executed in the order sent, and each settles as soon as its reply
 * comes, which is what the store wants (see RedisStore's dispatch).
 */
export async function runScript(
  client: Redis | Cluster,
  script: LuaScript,
  calls: readonly ScriptCall[],
  pipeline: boolean,
): Promise<Settled[]> {
  const first = await send(client, calls, pipeline, (call) => ['evalsha', script.sha, call]);
  const retry = first.flatMap((s, i) => (!s.ok && isNoScript(s.error) ? [i] : []));
  if (retry.length === 0) return first;
  const second = await send(
    client,
    retry.map((i) => calls[i]!),
    pipeline,
    (call) => ['eval', script.source, call],
  );
  retry.forEach((i, j) => (first[i] = second[j]!));
  return first;
}

type Command = ['evalsha' | 'eval', string, ScriptCall];

async function send(
  client: Redis | Cluster,
  calls: readonly ScriptCall[],
  pipeline: boolean,
  command: (call: ScriptCall) => Command,
): Promise<Settled[]> {
  if (pipeline && calls.length > 1) {
    const p = client.pipeline();
    for (const call of calls) {
      const [name, body, { keys, args }] = command(call);
      p[name](body, keys.length, ...keys, ...args);
    }
    const results = (await p.exec()) ?? [];
    return calls.map((_, i) => {
      const [error, reply] = results[i] ?? [new Error('the pipeline returned no result'), undefined];
      return error ? { ok: false, error } : { ok: true, reply };
    });
  }
  return Promise.all(
    calls.map(async (call): Promise<Settled> => {
      const [name, body, { keys, args }] = command(call);
      try {
        return { ok: true, reply: await client[name](body, keys.length, ...keys, ...args) };
      } catch (error) {
        return { ok: false, error };
      }
    }),
  );
}
