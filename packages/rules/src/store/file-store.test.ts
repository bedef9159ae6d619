import { mkdtempSync, readFileSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isSluiceError } from '@sluice/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { nextVersion, rejection } from '../../test/store-helpers.js';
import { FileRuleStore, isRulesError, type FileRuleStoreOptions } from '../index.js';

const V1 = 'resources:\n  api: { limits: { algorithm: gcra, limit: 100 } }\n';
const V2 = 'resources:\n  api: { limits: { algorithm: gcra, limit: 200 } }\n';
const V3 =
  'resources:\n  api: { limits: { algorithm: gcra, limit: 300 } }\n  db: { limits: { algorithm: concurrency, limit: 5 } }\n';
const who = { author: 'ana', reason: 'test' };

let dir: string;
const stores: FileRuleStore[] = [];
let clock = Date.UTC(2026, 0, 1);

function open(options: Partial<FileRuleStoreOptions> = {}): FileRuleStore {
  const s = new FileRuleStore({ dir, now: () => clock, pollIntervalMs: 10, ...options });
  stores.push(s);
  return s;
}

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'sluice-rules-store-'));
});

afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
});

describe('FileRuleStore', () => {
  it('starts empty and records each change as the next version', async () => {
    const store = open();
    expect(await store.current()).toBeUndefined();
    expect(await store.history()).toEqual([]);
    const v1 = await store.apply(V1, { ...who, file: 'rules.yaml' });
    clock += 1000;
    const v2 = await store.apply(V2, { author: 'bo', reason: 'double it' });
    expect([v1.version, v2.version]).toEqual([1, 2]);
    expect(v1.createdAt).toBe('2026-01-01T00:00:00.000Z');
    expect(v2.createdAt).toBe('2026-01-01T00:00:01.000Z');
    expect(v2.ruleSet.resources.api!.limits[0]!.limit).toBe(200);
    expect((await store.current())!.version).toBe(2);
    expect((await store.get(1)).source).toBe(V1);
    expect(v1.hash).toBe(v1.ruleSet.hash);
  });

  it('never records invalid text', async () => {
    const store = open();
    await store.apply(V1, who);
    const e = await rejection(store.apply('resources: { api: { limits: { algorithm: gcra, limit: 0 } } }', who));
    expect(isRulesError(e, 'SLUICE_ERR_INVALID_RULES')).toBe(true);
    expect(e.message).toBe('rules.yaml: resources.api.limits.limit: must be between 1 and 1000000000, got 0');
    expect((await store.current())!.version).toBe(1);
    expect(readdirSync(join(dir, 'versions'))).toEqual(['0000000001.json']);
  });

  it('validates author, reason and file', async () => {
    const store = open();
    const long = 'x'.repeat(257);
    for (const [options, field] of [
      [{ author: '', reason: 'r' }, 'author'],
      [{ author: 'a', reason: long }, 'reason'],
      [{ author: 'a', reason: 'r', file: 'a\nb' }, 'file'],
      [{ author: 'a', reason: 'r', expectedVersion: -1 }, 'expectedVersion'],
    ] as const) {
      const e = await rejection(store.apply(V1, options));
      expect(isSluiceError(e, 'SLUICE_ERR_INVALID_OPTIONS')).toBe(true);
      expect((e as { field?: string }).field).toBe(field);
    }
    expect(await store.current()).toBeUndefined();
  });

  it('lists history newest first, bounded by limit', async () => {
    const store = open();
    for (const t of [V1, V2, V3]) await store.apply(t, who);
    const h = await store.history({ limit: 2 });
    expect(h.map((m) => m.version)).toEqual([3, 2]);
    expect(h[0]).toEqual({
      version: 3,
      author: 'ana',
      reason: 'test',
      createdAt: new Date(clock).toISOString(),
      hash: (await store.get(3)).hash,
      file: 'rules.yaml',
    });
  });

  it('rolls back by making a new version with the old content', async () => {
    const store = open();
    const v1 = await store.apply(V1, { ...who, file: 'base.yaml' });
    await store.apply(V2, who);
    const v3 = await store.rollback(1, { author: 'oncall', reason: 'errors after v2' });
    expect(v3.version).toBe(3);
    expect(v3.rolledBackFrom).toBe(1);
    expect(v3.source).toBe(V1);
    expect(v3.hash).toBe(v1.hash);
    expect(v3.file).toBe('base.yaml');
    expect((await store.history({ limit: 1 }))[0]!.rolledBackFrom).toBe(1);
  });

  it('diffs two versions, structured and as text', async () => {
    const store = open();
    await store.apply(V1, who);
    await store.apply(V3, who);
    const d = await store.diff(1, 2);
    expect(d.from).toBe(1);
    expect(d.to).toBe(2);
    expect(d.resources.added).toEqual(['db']);
    expect(d.resources.changed).toEqual([{ name: 'api', changes: [{ path: 'limits[0].limit', before: 100, after: 300 }] }]);
    expect(d.text).toBe(
      [
        '--- v1/rules.yaml',
        '+++ v2/rules.yaml',
        '@@ -1,2 +1,3 @@',
        ' resources:',
        '-  api: { limits: { algorithm: gcra, limit: 100 } }',
        '+  api: { limits: { algorithm: gcra, limit: 300 } }',
        '+  db: { limits: { algorithm: concurrency, limit: 5 } }',
        '',
      ].join('\n'),
    );
  });

  it('fails a change whose expected version moved', async () => {
    const store = open();
    await store.apply(V1, { ...who, expectedVersion: 0 });
    await store.apply(V2, { ...who, expectedVersion: 1 });
    const e = await rejection(store.apply(V3, { ...who, expectedVersion: 1 }));
    expect(isRulesError(e, 'SLUICE_ERR_RULE_CONFLICT')).toBe(true);
    expect((await store.current())!.version).toBe(2);
    const first = await rejection(open().apply(V1, { ...who, expectedVersion: 0 }));
    expect(isRulesError(first, 'SLUICE_ERR_RULE_CONFLICT')).toBe(true);
  });

  it('survives a restart: a new instance on the directory sees every version', async () => {
    const a = open();
    await a.apply(V1, who);
    await a.apply(V2, who);
    await a.close();
    const b = open();
    expect((await b.current())!.version).toBe(2);
    expect((await b.get(1)).ruleSet.resources.api!.limits[0]!.limit).toBe(100);
    expect((await b.apply(V3, who)).version).toBe(3);
  });

  it('gives distinct consecutive versions to concurrent writers', async () => {
    const a = open();
    const b = open();
    const made = await Promise.all([V1, V2, V3, V1, V2, V3].map((t, i) => (i % 2 ? a : b).apply(t, who)));
    expect(made.map((v) => v.version).sort()).toEqual([1, 2, 3, 4, 5, 6]);
    expect((await a.history({ limit: 10 })).map((m) => m.version)).toEqual([6, 5, 4, 3, 2, 1]);
  });

  it('keeps at most maxVersions', async () => {
    const store = open({ maxVersions: 2 });
    for (const t of [V1, V2, V3]) await store.apply(t, who);
    expect((await store.history({ limit: 2 })).map((m) => m.version)).toEqual([3, 2]);
    const e = await rejection(store.get(1));
    expect(isRulesError(e, 'SLUICE_ERR_RULE_VERSION_NOT_FOUND')).toBe(true);
    expect(await rejection(store.rollback(1, who))).toMatchObject({ code: 'SLUICE_ERR_RULE_VERSION_NOT_FOUND' });
    expect(readdirSync(join(dir, 'versions')).sort()).toEqual(['0000000002.json', '0000000003.json']);
  });

  it('ignores a version file that a crashed change left past the pointer', async () => {
    const store = open();
    await store.apply(V1, who);
    const orphan = JSON.parse(readFileSync(join(dir, 'versions', '0000000001.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(dir, 'versions', '0000000002.json'), JSON.stringify({ ...orphan, version: 2 }));
    const fresh = open();
    expect(await rejection(fresh.get(2))).toMatchObject({ code: 'SLUICE_ERR_RULE_VERSION_NOT_FOUND' });
    expect((await fresh.history()).map((m) => m.version)).toEqual([1]);
    expect((await fresh.apply(V2, who)).source).toBe(V2);
    expect((await open().get(2)).source).toBe(V2);
  });

  it('reports data it did not write as corrupt', async () => {
    const store = open();
    await store.apply(V1, who);
    writeFileSync(join(dir, 'current'), 'not json');
    expect(await rejection(open().current())).toMatchObject({ code: 'SLUICE_ERR_RULE_STORE_CORRUPT' });
  });

  it('waits for a live lock up to its timeout, and breaks a stale one', async () => {
    const store = open({ lockTimeoutMs: 50, staleLockMs: 60_000 });
    const lock = join(dir, 'lock');
    writeFileSync(lock, '123\n');
    const e = await rejection(store.apply(V1, who));
    expect(isRulesError(e, 'SLUICE_ERR_RULE_STORE_UNAVAILABLE')).toBe(true);
    expect(await store.current()).toBeUndefined();
    // A lock last written long ago was left by a writer that crashed.
    const past = new Date(Date.now() - 120_000);
    utimesSync(lock, past, past);
    expect((await store.apply(V1, who)).version).toBe(1);
    expect(readdirSync(dir).sort()).toEqual(['current', 'versions']);
  });

  it('tells watchers the current version, then each change, from any instance', async () => {
    const writer = open();
    await writer.apply(V1, who);
    const watcher = open();
    const seen: number[] = [];
    const first = nextVersion(watcher, 0);
    const stop = watcher.watch((v) => seen.push(v.version));
    expect((await first).version).toBe(1);
    const second = nextVersion(watcher, 1);
    await writer.apply(V2, who);
    const v2 = await second;
    expect(v2.version).toBe(2);
    expect(v2.ruleSet.resources.api!.limits[0]!.limit).toBe(200);
    stop();
    const third = nextVersion(watcher, 2);
    await writer.apply(V3, who);
    await third;
    expect(seen).toEqual([1, 2]);
  });

  it('tells local watchers of a local change without waiting for a poll', async () => {
    const store = open({ pollIntervalMs: 60_000 });
    const next = nextVersion(store, 0);
    await store.apply(V1, who);
    expect((await next).version).toBe(1);
  });

  it('refuses use after close', async () => {
    const store = open();
    await store.close();
    const e = await rejection(store.current());
    expect(isSluiceError(e, 'SLUICE_ERR_CLOSED')).toBe(true);
    expect(() => store.watch(() => {})).toThrow(/closed/);
  });

  it('validates its options', () => {
    expect(() => new FileRuleStore({ dir: '' })).toThrow('dir: must not be empty');
    expect(() => new FileRuleStore({ dir, maxVersions: 0 })).toThrow(/^maxVersions: /);
  });
});
