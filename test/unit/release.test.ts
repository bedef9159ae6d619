/**
 * The published packages are in step with the root package.json (scripts/release.mjs): one
 * version, siblings pinned to it exactly, the same engines, licence and repository.
 */
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain script of the repository, without types.
import { problems, publishedPackages, releaseFields, synced } from '../../scripts/release.mjs';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

describe('release fields', () => {
  it('every published package is in step with the root', () => {
    expect((problems as (root: string) => string[])(ROOT)).toEqual([]);
  });

  it('pins @sluice/* siblings to the release version and leaves other ranges alone', () => {
    const fields = {
      version: '1.2.3',
      license: 'Apache-2.0',
      engines: { node: '>=20.19' },
      repository: { type: 'git', url: 'u' },
    };
    const pkg = {
      name: '@sluice/x',
      dependencies: { '@sluice/core': '*', ioredis: '5.9.2' },
      peerDependencies: { '@sluice/redis': '^0.1.0' },
    };
    const out = (synced as (p: object, d: string, f: object, n: Set<string>) => Record<string, unknown>)(
      pkg,
      'packages/x',
      fields,
      new Set(['@sluice/core', '@sluice/redis']),
    );
    expect(out['dependencies']).toEqual({ '@sluice/core': '1.2.3', ioredis: '5.9.2' });
    expect(out['peerDependencies']).toEqual({ '@sluice/redis': '1.2.3' });
    expect(out['repository']).toEqual({ type: 'git', url: 'u', directory: 'packages/x' });
    expect(out['version']).toBe('1.2.3');
  });

  it('publishes every workspace but the private bench', () => {
    const names = (publishedPackages as (root: string) => { pkg: { name: string } }[])(ROOT).map((p) => p.pkg.name);
    expect(names).toContain('@sluice/core');
    expect(names).not.toContain('@sluice/bench');
    expect((releaseFields as (root: string) => { version: string })(ROOT).version).toMatch(/^\d+\.\d+\.\d+/);
  });
});
