import { describe, expect, it } from 'vitest';
import { StreamErrorCodes, isStreamError } from '../errors.js';
import { loadPeer } from './peer.js';

describe('loadPeer', () => {
  it('loads an installed package', async () => {
    const path = await loadPeer<typeof import('node:path')>('node:path', 'node:path', '@sluice/stream/test');
    expect(path.join('a', 'b')).toBe(`a${path.sep}b`);
  });

  it('names the subpath and the package to install when the package is missing', async () => {
    const err: unknown = await loadPeer('sluice-no-such-package', 'sluice-no-such-package', '@sluice/stream/nowhere').catch(
      (e: unknown) => e,
    );
    expect(isStreamError(err, StreamErrorCodes.MISSING_PEER)).toBe(true);
    expect((err as Error).message).toContain('@sluice/stream/nowhere needs the package sluice-no-such-package');
    expect((err as Error).message).toContain('npm install sluice-no-such-package');
    expect((err as Error).cause).toBeInstanceOf(Error);
  });

  it('passes on any other failure as it is', async () => {
    // A package that is there but fails to load (here: a subpath it does not export) is not "missing".
    const err: unknown = await loadPeer('nats/no-such-subpath', 'sluice-other', '@sluice/stream/nats').catch((e: unknown) => e);
    expect(isStreamError(err)).toBe(false);
  });
});
