import { readFileSync } from 'node:fs';
import { ErrorCodes } from '@sluice/core';
import { RulesErrorCodes } from '@sluice/rules';
import { ServerErrorCodes } from '@sluice/server';
import { StreamErrorCodes, TransportErrorCodes } from '@sluice/stream';
import { describe, expect, it } from 'vitest';

/** Every package's stable error codes: each must be documented. */
const codeMaps: Record<string, Record<string, string>> = {
  '@sluice/core': ErrorCodes,
  '@sluice/rules': RulesErrorCodes,
  '@sluice/server': ServerErrorCodes,
  '@sluice/stream transports': TransportErrorCodes,
  '@sluice/stream and @sluice/governance': StreamErrorCodes,
};

describe('docs/errors.md', () => {
  const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');
  for (const [pkg, codes] of Object.entries(codeMaps)) {
    it(`documents every code of ${pkg}`, () => {
      const missing = Object.values(codes).filter((code) => !doc.includes(`\`${code}\``));
      expect(missing).toEqual([]);
    });
  }
});
