import { describe, expect, it } from 'vitest';
import { defaultPayloadConverter } from '@temporalio/common';
import { TIER_NAME } from '@sluice/core';
import { PRIORITY_HEADER, TENANT_HEADER, TIER_NAME_PATTERN, readContextHeaders, withContextHeaders } from './headers.js';

describe('priority and tenant headers', () => {
  it('round-trip through activity headers, keeping other headers', () => {
    const other = defaultPayloadConverter.toPayload('x');
    const headers = withContextHeaders({ trace: other }, { priority: 'core', tenant: 'acme' });
    expect(headers.trace).toBe(other);
    expect(readContextHeaders(headers)).toEqual({ priority: 'core', tenant: 'acme' });
  });

  it('adds nothing for an empty context', () => {
    expect(withContextHeaders({}, {})).toEqual({});
    expect(readContextHeaders(undefined)).toEqual({});
  });

  it('ignores invalid or undecodable values instead of failing the activity', () => {
    const headers = {
      [PRIORITY_HEADER]: defaultPayloadConverter.toPayload('not a tier'),
      [TENANT_HEADER]: { metadata: { encoding: new TextEncoder().encode('binary/unknown') }, data: new Uint8Array([1]) },
    };
    expect(readContextHeaders(headers)).toEqual({});
    expect(readContextHeaders({ [TENANT_HEADER]: defaultPayloadConverter.toPayload('a|b') })).toEqual({});
    expect(readContextHeaders({ [TENANT_HEADER]: defaultPayloadConverter.toPayload('x'.repeat(129)) })).toEqual({});
  });

  it('carries any tier name, checked as core checks them', () => {
    expect(TIER_NAME_PATTERN.source).toBe(TIER_NAME.source);
    const headers = withContextHeaders({}, { priority: 'vip' });
    expect(readContextHeaders(headers)).toEqual({ priority: 'vip' });
  });
});
