import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION, ScriptCodes } from './codes.js';
import { batchScriptSource, buildScript, loadScript, resolveIncludes } from './scripts.js';

const lua = (file: string) => readFileSync(fileURLToPath(new URL(`../lua/${file}`, import.meta.url)), 'utf8');

describe('Lua includes', () => {
  const files: Record<string, string> = {
    '/s/main.lua': 'local a = 1\n--@include "lib/x.lua"\n--@include "lib/y.lua"\nreturn a',
    '/s/lib/x.lua': '--@include "y.lua"\nlocal x = 2',
    '/s/lib/y.lua': 'local y = 3',
  };
  const read = (p: string) => {
    const text = files[p];
    if (text === undefined) throw new Error(`no ${p}`);
    return text;
  };

  it('resolves includes relative to the including file, each file once', () => {
    const out = resolveIncludes('/s/main.lua', read);
    expect(out.match(/local y = 3/g)).toHaveLength(1);
    expect(out.indexOf('local y = 3')).toBeLessThan(out.indexOf('local x = 2'));
    expect(out).not.toMatch(/^--@include/m);
  });

  it('includes each file once, even when files include each other', () => {
    const mutual: Record<string, string> = { '/c/a.lua': 'A\n--@include "b.lua"', '/c/b.lua': 'B\n--@include "a.lua"' };
    const out = resolveIncludes('/c/a.lua', (p) => mutual[p]!);
    expect(out.match(/^A$/gm)).toHaveLength(1);
    expect(out.match(/^B$/gm)).toHaveLength(1);
    expect(() => resolveIncludes('/c/missing.lua', read)).toThrow(/no \/c\/missing.lua/);
  });
});

describe('the batch script', () => {
  const script = batchScriptSource();

  it('is fully resolved, named with its protocol version and identified by its SHA1', () => {
    expect(script.source).not.toMatch(/^--@include/m);
    expect(script.name).toBe(`sluice:batch:v${PROTOCOL_VERSION}`);
    expect(script.sha).toBe(createHash('sha1').update(script.source).digest('hex'));
    for (const name of ['token_bucket', 'gcra', 'sliding_window', 'fixed_window', 'sliding_log', 'concurrency']) {
      expect(script.source, name).toContain(`local ${name} = {`);
    }
  });

  it('is one file in two forms: a script that runs the entry, a library that registers it', () => {
    const body = 'local function main(keys, argv)\n  return #keys\nend';
    const built = buildScript('main.lua', body, 'main');
    expect(built.source).toBe(`${body}\nreturn main(KEYS, ARGV)\n`);
    const hash = createHash('sha1').update(body).digest('hex').slice(0, 12);
    expect(built.functionName).toBe(`sluice_main_v${PROTOCOL_VERSION}_${hash}`);
    const lines = built.library.split('\n');
    expect(lines[0]).toBe(`#!lua name=${built.functionName}`);
    // The file runs inside a function, so loading the library touches no global but redis.
    expect(built.library).toContain(`local function program()\n${body}\nreturn { main }\nend\n`);
    expect(built.library).toContain(`redis.register_function{ function_name = '${built.functionName}', flags = {}`);
    expect(built.more).toEqual({});
    // Other code, another library: processes running different code never replace each other's.
    expect(buildScript('main.lua', `${body}\n`, 'main').functionName).not.toBe(built.functionName);
    expect(script.functionName).toMatch(new RegExp(`^sluice_batch_v${PROTOCOL_VERSION}_[0-9a-f]{12}$`));
    expect(loadScript('peers.lua', 'peers').functionName).toMatch(/^sluice_peers_v/);
  });

  it('registers further entries as functions of their own, each with a script form', () => {
    const body = 'local function main(keys, argv)\n  return 1\nend\nlocal function lean(keys, argv)\n  return 2\nend';
    const built = buildScript('main.lua', body, 'main', ['lean']);
    const lean = built.more.lean!;
    expect(lean.functionName).toBe(`${built.functionName}_lean`);
    expect(lean.source).toBe(`${body}\nreturn lean(KEYS, ARGV)\n`);
    expect(lean.sha).toBe(createHash('sha1').update(lean.source).digest('hex'));
    expect(built.library).toContain(`return { main, lean }`);
    expect(built.library).toContain(
      `function_name = '${lean.functionName}', flags = {}, callback = function(keys, args)\n  run = run or program()\n  return run[2](keys, args)`,
    );
    expect(script.more.consume_one?.functionName).toBe(`${script.functionName}_consume_one`);
  });

  it('speaks the protocol version the client sends', () => {
    expect(lua('batch.lua')).toContain(`local PROTOCOL = '${PROTOCOL_VERSION}'`);
  });

  it('defines the result codes the client maps', () => {
    const defined = Object.fromEntries(
      [...lua('lib/codes.lua').matchAll(/^local (\w+) = (-?\d+)$/gm)].map((m) => [m[1]!, Number(m[2])]),
    );
    expect(defined).toEqual(ScriptCodes);
  });

  it('uses the core constants and bounds', async () => {
    const core = await import('@sluice/core');
    const numeric = lua('lib/numeric.lua');
    const constant = (name: string) => Number(new RegExp(`^local ${name} = (\\S+)$`, 'm').exec(numeric)?.[1]);
    expect(constant('EPS_PERMITS')).toBe(core.EPS_PERMITS);
    expect(constant('EPS_MS')).toBe(core.EPS_MS);
    const batch = lua('batch.lua');
    const bound = (name: string) => Number(new RegExp(`^local ${name} = (\\d+)$`, 'm').exec(batch)?.[1]);
    expect(bound('MAX_LIMITS')).toBe(core.POLICY_BOUNDS.maxLimitsPerKey);
    expect(bound('MAX_LIMIT')).toBe(core.POLICY_BOUNDS.maxLimit);
    expect(bound('MAX_LOG_LIMIT')).toBe(core.POLICY_BOUNDS.maxLogLimit);
    expect(bound('MAX_WINDOW_MS')).toBe(core.POLICY_BOUNDS.maxWindowMs);
    expect(bound('MAX_SLICES')).toBe(core.POLICY_BOUNDS.maxSlices);
    expect(bound('MIN_PERMIT_TTL_MS')).toBe(core.POLICY_BOUNDS.minPermitTtlMs);
    expect(bound('MAX_PERMIT_TTL_MS')).toBe(core.POLICY_BOUNDS.maxPermitTtlMs);
    expect(bound('MAX_ID_LENGTH')).toBe(core.POLICY_BOUNDS.maxIdLength);
    expect(bound('MAX_HOLD_MS')).toBe(core.POLICY_BOUNDS.maxHoldMs);
    expect(Number(/^local MAX_STAMP_MS = (\S+)$/m.exec(batch)?.[1])).toBe(core.POLICY_BOUNDS.maxStampMs);
    expect(Number(/^local MAX_CORE_SHARE = (\S+)$/m.exec(batch)?.[1])).toBe(core.MAX_CORE_SHARE);
    expect(bound('MAX_COST')).toBe(core.MAX_COST);
    expect(bound('MAX_BOOKING_ID_LENGTH')).toBe(core.MAX_BOOKING_ID_LENGTH);
    expect(bound('MAX_AHEAD_MS')).toBe(core.BOOKING_BOUNDS.maxAheadMs);
    expect(bound('MAX_CLAIM_WINDOW_MS')).toBe(core.BOOKING_BOUNDS.claimWindowMs);
    expect(bound('MAX_BOOKINGS')).toBe(core.BOOKING_BOUNDS.maxBookings);
    // Outcome codes are the indexes of the core's list.
    const booking = lua('lib/booking.lua');
    const outcomes = /^local BOOK_ADMITTED, BOOK_BOOKED, BOOK_CLAIMED, BOOK_DENIED, BOOK_MISSING = (.+)$/m.exec(booking)?.[1];
    expect(outcomes?.split(', ').map(Number)).toEqual(core.BOOK_OUTCOMES.map((_, i) => i));
    expect(core.BOOK_OUTCOMES).toEqual(['admitted', 'booked', 'claimed', 'denied', 'missing']);
    expect(Object.values(core.ALGORITHM_CODES).sort()).toEqual([1, 2, 3, 4, 5, 6]);
    for (const [algorithm, code] of Object.entries(core.ALGORITHM_CODES)) {
      expect(lua(`algorithms/${algorithm.replace('-', '_')}.lua`), algorithm).toContain(`= { code = ${code} }`);
    }
  });
});
