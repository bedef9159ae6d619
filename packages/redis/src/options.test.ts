import { ErrorCodes } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { compileRedisStoreOptions } from './options.js';

describe('compileRedisStoreOptions', () => {
  it('fills defaults and freezes', () => {
    const o = compileRedisStoreOptions({ url: 'redis://127.0.0.1:6379' });
    expect(o).toEqual({
      source: { kind: 'url', url: 'redis://127.0.0.1:6379' },
      prefix: 'sluice:',
      commandTimeoutMs: undefined,
      minCommandTimeoutMs: 50,
      maxCommandTimeoutMs: 1000,
      peerRegistry: true,
      connectTimeoutMs: 2000,
      maxBatchSize: 128,
      slotsRefreshIntervalMs: 5000,
    });
    expect(Object.isFrozen(o)).toBe(true);
  });

  it('parses cluster seeds', () => {
    const o = compileRedisStoreOptions({ clusterNodes: ['127.0.0.1:7000', { host: 'redis-1', port: 7001 }] });
    expect(o.source).toEqual({
      kind: 'cluster',
      nodes: [
        { host: '127.0.0.1', port: 7000 },
        { host: 'redis-1', port: 7001 },
      ],
    });
  });

  it('names the offending option', () => {
    const field = (options: object) => {
      // Deliberately malformed options, as untyped callers could pass.
      try {
        compileRedisStoreOptions(options);
      } catch (e) {
        expect(e).toMatchObject({ code: ErrorCodes.INVALID_OPTIONS });
        return (e as { field: string }).field;
      }
      throw new Error('expected an error');
    };
    expect(field({})).toBe('options');
    expect(field({ url: 'redis://a', clusterNodes: ['a:1'] })).toBe('options');
    expect(field({ url: 'localhost:6379' })).toBe('url');
    expect(field({ clusterNodes: ['a:1', 'b'] })).toBe('clusterNodes[1]');
    expect(field({ clusterNodes: [{ host: 'a', port: 70000 }] })).toBe('clusterNodes[0]');
    expect(field({ url: 'redis://a', maxBatchSize: 4097 })).toBe('maxBatchSize');
    expect(field({ url: 'redis://a', commandTimeoutMs: 0 })).toBe('commandTimeoutMs');
    expect(field({ url: 'redis://a', minCommandTimeoutMs: 100, maxCommandTimeoutMs: 99 })).toBe('maxCommandTimeoutMs');
    expect(field({ url: 'redis://a', peerRegistry: 'yes' as unknown as boolean })).toBe('peerRegistry');
    expect(field({ url: 'redis://a', prefix: 5 })).toBe('prefix');
    expect(field({ url: 'redis://a', timeout: 5 })).toBe('timeout');
    expect(field({ client: { status: 'ready' } })).toBe('client');
  });
});
