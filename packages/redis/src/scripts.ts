import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Cluster, Redis } from 'ioredis';
import { PROTOCOL_VERSION } from './codes.js';
import { isNotLoaded, lacksFunctions } from './errors.js';
import { evalScript } from './kit.js';

/**
 * A Lua program in the two forms Redis runs: a Redis Functions library (FCALL, Redis 7+) and a
 * script (EVALSHA, older servers). Both are the same file, with every include resolved; the file
 * defines one entry function of (KEYS, ARGV) and calls nothing itself.
 */
export interface LuaScript {
  /** Versioned name, for logs and metrics: the script's file and protocol version. */
  readonly name: string;
  /** The script form: the file, then `return <entry>(KEYS, ARGV)`. */
  readonly source: string;
  /** SHA1 of `source`, what EVALSHA names it by. */
  readonly sha: string;
  /** The library form: `#!lua name=<functionName>`, registering the entry as `functionName`. */
  readonly library: string;
  /**
   * Name of the library and of the function it registers: `sluice_<file>_v<protocol>_<hash>`,
   * the hash taken from the code, so processes running different code never replace each
   * other's library (each runs exactly its own, as with EVALSHA).
   */
  readonly functionName: string;
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

const sha1 = (text: string): string => createHash('sha1').update(text).digest('hex');

/**
 * Builds both forms of a Lua program from `body` (includes resolved), whose function `entry`
 * takes (KEYS, ARGV).
 *
 * A library's top level may use nothing but `redis.register_function` (not even `math`), so the
 * library wraps the file in a function run once, at its first call: from then on a call only
 * runs `entry`, where EVALSHA runs the whole file (creating every one of its functions) each
 * time.
 */
export function buildScript(file: string, body: string, entry: string): LuaScript {
  const base = file.replace(/\.lua$/, '');
  const source = `${body}\nreturn ${entry}(KEYS, ARGV)\n`;
  const functionName = `sluice_${base}_v${PROTOCOL_VERSION}_${sha1(body).slice(0, 12)}`;
  const library = [
    `#!lua name=${functionName}`,
    'local function program()',
    body,
    `return ${entry}`,
    'end',
    'local run',
    `redis.register_function{ function_name = '${functionName}', flags = {}, callback = function(keys, args)`,
    '  run = run or program()',
    '  return run(keys, args)',
    'end }',
    '',
  ].join('\n');
  return Object.freeze({ name: `sluice:${base}:v${PROTOCOL_VERSION}`, source, sha: sha1(source), library, functionName });
}

/** Loads a Lua program from `lua/` (a sibling of both `src/` and `dist/`). */
export function loadScript(file: string, entry: string): LuaScript {
  return buildScript(file, resolveIncludes(fileURLToPath(new URL(`../lua/${file}`, import.meta.url))), entry);
}

let batchScript: LuaScript | undefined;

/** The batch program (`lua/batch.lua`), loaded on first use. */
export function batchScriptSource(): LuaScript {
  batchScript ??= loadScript('batch.lua', 'batch');
  return batchScript;
}

/** One call of a Lua program: its keys and arguments. */
export interface ScriptCall {
  readonly keys: readonly string[];
  readonly args: readonly (string | Buffer)[];
}

/** Connections found to have no Redis Functions (Redis < 7, or FCALL not permitted). */
const withoutFunctions = new WeakSet<Redis | Cluster>();

/**
 * Runs one Lua program on one connection: by FCALL where Redis has functions, else by EVALSHA.
 * Which of the two a connection takes is found out once, by its first FCALL.
 *
 * A server may lack the code at any time (a restart, a failover to a node that never had it,
 * FUNCTION FLUSH or SCRIPT FLUSH): {@link run} is the one place that handles that, by loading
 * it and trying once more.
 */
export class ScriptRunner {
  readonly #client: Redis | Cluster;
  readonly #script: LuaScript;
  /** A FUNCTION LOAD under way: calls that miss the function meanwhile wait for it. */
  #loading: Promise<void> | undefined;

  constructor(client: Redis | Cluster, script: LuaScript) {
    this.#client = client;
    this.#script = script;
  }

  /**
   * Resolves to the program's reply; rejects with what ioredis rejected the call with. Not an
   * async function: it is on the path every decision takes, so a call that needs no recovery
   * settles as ioredis' promise does (with the store's connection losing ioredis' own timer,
   * about 4 µs less client CPU a call at one in flight: docs/benchmarks.md).
   */
  run(call: ScriptCall): Promise<unknown> {
    if (withoutFunctions.has(this.#client)) return evalScript(this.#client, this.#script, call.keys, call.args);
    let sent: Promise<unknown>;
    try {
      sent = this.#fcall(call);
    } catch (error) {
      return this.#recover(call, error);
    }
    return sent.catch((error: unknown) => this.#recover(call, error));
  }

  /** After a failed FCALL: EVALSHA where functions are missing, or load the library and call again. */
  async #recover(call: ScriptCall, error: unknown): Promise<unknown> {
    if (lacksFunctions(error)) return this.#withoutFunctions(call);
    if (!isNotLoaded(error)) throw error;
    try {
      await (this.#loading ??= this.#load().finally(() => (this.#loading = undefined)));
    } catch (error) {
      if (lacksFunctions(error)) return this.#withoutFunctions(call);
      throw error;
    }
    return this.#fcall(call);
  }

  #withoutFunctions(call: ScriptCall): Promise<unknown> {
    withoutFunctions.add(this.#client);
    return this.run(call);
  }

  /**
   * Loads the library where it is missing: on the server, or on every master of a Cluster (the
   * one that answered is among them; replicas get it from their master). A master that cannot
   * be reached is skipped: the retry tells whether the one that matters has it.
   */
  async #load(): Promise<void> {
    const load = (node: Redis | Cluster) => node.call('FUNCTION', 'LOAD', 'REPLACE', this.#script.library);
    if (!this.#client.isCluster) {
      await load(this.#client);
      return;
    }
    const results = await Promise.allSettled((this.#client as Cluster).nodes('master').map(load));
    const refused = results.find((r): r is PromiseRejectedResult => r.status === 'rejected' && lacksFunctions(r.reason));
    if (refused) throw refused.reason;
  }

  #fcall({ keys, args }: ScriptCall): Promise<unknown> {
    return this.#client.fcall(this.#script.functionName, keys.length, ...keys, ...args);
  }
}
