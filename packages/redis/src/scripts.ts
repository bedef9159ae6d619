import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Cluster, Redis } from 'ioredis';
import { PROTOCOL_VERSION } from './codes.js';
import { isNotLoaded, lacksFunctions } from './errors.js';
import { evalScript } from './kit.js';

/** One entry function of a Lua program, in the two forms Redis runs. */
export interface LuaEntry {
  /** The script form: the file, then `return <entry>(KEYS, ARGV)`. */
  readonly source: string;
  /** SHA1 of `source`, what EVALSHA names it by. */
  readonly sha: string;
  /** The name the library registers the entry under, what FCALL names it by. */
  readonly functionName: string;
}

/**
 * A Lua program in the two forms Redis runs: a Redis Functions library (FCALL, Redis 7+) and a
 * script (EVALSHA, older servers). Both are the same file, with every include resolved; the file
 * defines one main entry function of (KEYS, ARGV), maybe more, and calls nothing itself.
 */
export interface LuaScript extends LuaEntry {
  /** Versioned name, for logs and metrics: the script's file and protocol version. */
  readonly name: string;
  /** The library form: `#!lua name=<functionName>`, registering each entry. */
  readonly library: string;
  /**
   * Name of the library and of the function it registers for the main entry:
   * `sluice_<file>_v<protocol>_<hash>`, the hash taken from the code, so processes running
   * different code never replace each other's library (each runs exactly its own, as with
   * EVALSHA). A further entry `e` is registered as `<functionName>_e`.
   */
  readonly functionName: string;
  /** The further entries, by their Lua names (a script form of their own each). */
  readonly more: Readonly<Record<string, LuaEntry>>;
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
 * takes (KEYS, ARGV), as do the functions named in `more`, its further entries.
 *
 * A library's top level may use nothing but `redis.register_function` (not even `math`), so the
 * library wraps the file in a function run once, at the first call of any entry: from then on a
 * call only runs its entry, where EVALSHA runs the whole file (creating every one of its
 * functions) each time.
 */
export function buildScript(file: string, body: string, entry: string, more: readonly string[] = []): LuaScript {
  const base = file.replace(/\.lua$/, '');
  const form = (e: string): { source: string; sha: string } => {
    const source = `${body}\nreturn ${e}(KEYS, ARGV)\n`;
    return { source, sha: sha1(source) };
  };
  const functionName = `sluice_${base}_v${PROTOCOL_VERSION}_${sha1(body).slice(0, 12)}`;
  const entries = [entry, ...more];
  const library = [
    `#!lua name=${functionName}`,
    'local function program()',
    body,
    `return { ${entries.join(', ')} }`,
    'end',
    'local run',
    ...entries.flatMap((e, i) => [
      `redis.register_function{ function_name = '${i === 0 ? functionName : `${functionName}_${e}`}', flags = {}, callback = function(keys, args)`,
      '  run = run or program()',
      `  return run[${i + 1}](keys, args)`,
      'end }',
    ]),
    '',
  ].join('\n');
  const extra = Object.fromEntries(more.map((e) => [e, Object.freeze({ ...form(e), functionName: `${functionName}_${e}` })]));
  return Object.freeze({
    name: `sluice:${base}:v${PROTOCOL_VERSION}`,
    ...form(entry),
    library,
    functionName,
    more: Object.freeze(extra),
  });
}

/** Loads a Lua program from `lua/` (a sibling of both `src/` and `dist/`). */
export function loadScript(file: string, entry: string, more: readonly string[] = []): LuaScript {
  return buildScript(file, resolveIncludes(fileURLToPath(new URL(`../lua/${file}`, import.meta.url))), entry, more);
}

let batchScript: LuaScript | undefined;

/** The batch program (`lua/batch.lua`, with its lean entry `consume_one`), loaded on first use. */
export function batchScriptSource(): LuaScript {
  batchScript ??= loadScript('batch.lua', 'batch', ['consume_one']);
  return batchScript;
}

/** One call of a Lua program: its keys and arguments, and the entry it calls when not the main one. */
export interface ScriptCall {
  readonly keys: readonly string[];
  readonly args: readonly (string | Buffer)[];
  /** A further entry's Lua name (see {@link LuaScript.more}). */
  readonly entry?: string;
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

  /** Resolves to the program's reply; rejects with what ioredis rejected the call with. */
  run(call: ScriptCall): Promise<unknown> {
    return new Promise((resolve, reject) => this.send(call, resolve, reject));
  }

  /**
   * Sends one call and hands its reply, or what ioredis rejected it with, to one of the
   * callbacks, never synchronously. The path of every decision: a call that needs no recovery
   * costs one reaction on ioredis' own promise, where an async function and the promises of the
   * layers around it took several, each a microtask and an allocation (docs/benchmarks.md).
   */
  send(call: ScriptCall, onReply: (reply: unknown) => void, onError: (error: unknown) => void): void {
    if (withoutFunctions.has(this.#client)) {
      evalScript(this.#client, this.#entry(call), call.keys, call.args).then(onReply, onError);
      return;
    }
    let sent: Promise<unknown>;
    try {
      sent = this.#fcall(call);
    } catch (error) {
      this.#recover(call, error).then(onReply, onError);
      return;
    }
    sent.then(onReply, (error: unknown) => this.#recover(call, error).then(onReply, onError));
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

  #fcall(call: ScriptCall): Promise<unknown> {
    const { keys, args } = call;
    return this.#client.fcall(this.#entry(call).functionName, keys.length, ...keys, ...args);
  }

  #entry(call: ScriptCall): LuaEntry {
    if (call.entry === undefined) return this.#script;
    const entry = this.#script.more[call.entry];
    if (entry === undefined) throw new Error(`${this.#script.name} has no entry ${call.entry}`);
    return entry;
  }
}
