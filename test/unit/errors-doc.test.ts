import { readFileSync } from 'node:fs';
import { ErrorCodes } from '@sluice/core';
import { expect, it } from 'vitest';

it('documents every error code in docs/errors.md', () => {
  const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');
  for (const code of Object.values(ErrorCodes)) expect(doc).toContain(`\`${code}\``);
});
