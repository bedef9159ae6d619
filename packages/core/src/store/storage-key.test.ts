import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import { filterKey } from '../local/prefilter.js';
import { checkKey } from '../shared/policy.js';
import { isTenantName } from '../admission/resource.js';
import {
  escapeKey,
  hasLoneSurrogate,
  resourceKey,
  splitKey,
  storageKey,
  tenantKey,
  unescapeKey,
  type StorageKeyParts,
} from './storage-key.js';

/** Characters that mean something to some encoding, and surrogate edge cases. */
const TRICKY = ['@', '#', '%', '|', '{', '}', '\u0000', '0', '1', 'a', ':', '\ufffd', '\ud83d\ude00', '#0', '%40', '%25'];
const trickyString = (max: number) => fc.array(fc.constantFrom(...TRICKY), { maxLength: max }).map((p) => p.join(''));
const resource = fc.constantFrom('api', 'api:x', 'a@b', 'db/x-1');
const key = fc.oneof(trickyString(6), fc.string({ maxLength: 8 })).filter((k) => !hasLoneSurrogate(k));
const tenant = fc.oneof(trickyString(5), fc.string({ minLength: 1, maxLength: 6 })).filter((t) => t !== '' && isTenantName(t));

type State = { kind: string; resource: string; key?: string; tenant?: string; part?: number };

/** Every kind of state a call can name, as a value to compare. */
const state: fc.Arbitrary<State> = fc.oneof(
  fc.record({ kind: fc.constant('key'), resource, key }),
  fc.record({ kind: fc.constant('tenant'), resource, tenant }),
  fc.record({ kind: fc.constant('part'), resource, key, part: fc.integer({ min: 0, max: 63 }) }),
);

function encode(s: State): string {
  if (s.kind === 'tenant') return tenantKey(s.resource, s.tenant!);
  if (s.kind === 'part') return splitKey(s.resource, s.key!, s.part!);
  return resourceKey(s.resource, s.key!);
}

/**
 * Reads a storage key back into its parts; throws `SLUICE_ERR_INVALID_KEY` if no encoder made it.
 * Sluice never reads a storage key back (store requests carry their parts): this decoder exists to
 * show the encoding is one-to-one.
 */
function parseStorageKey(storageKey: string): StorageKeyParts {
  const bar = storageKey.indexOf('|');
  if (bar < 0) return { resource: storageKey, key: '' };
  const resource = storageKey.slice(0, bar);
  const rest = storageKey.slice(bar + 1);
  if (rest.startsWith('@')) return { resource, key: '', tenant: rest.slice(1) };
  if (!rest.startsWith('#')) return { resource, key: callerKey(rest, storageKey) };
  if (rest === '#b') return { resource, key: '', pool: 'boost' };
  if (rest.startsWith('#b|')) return { resource, key: callerKey(rest.slice(3), storageKey), pool: 'boost' };
  const share = /^#(0|[1-9][0-9]{0,5})(?:\|(.*))?$/s.exec(rest);
  if (share === null) throw notAStorageKey(storageKey);
  const key = share[2] === undefined ? '' : callerKey(share[2], storageKey);
  return { resource, key, part: Number(share[1]) };
}

/** The caller key behind its escaped form, which must be exactly what {@link escapeKey} makes. */
function callerKey(escaped: string, storageKey: string): string {
  const key = unescapeKey(escaped);
  if (key === '' || escapeKey(key) !== escaped) throw notAStorageKey(storageKey);
  return key;
}

function notAStorageKey(storageKey: string): SluiceError {
  return new SluiceError(ErrorCodes.INVALID_KEY, `not a storage key: ${JSON.stringify(storageKey)}`, { field: 'key' });
}

describe('storage keys', () => {
  it('name distinct states distinctly, and read back into what made them', () => {
    fc.assert(
      fc.property(state, state, (a, b) => {
        const same = JSON.stringify(a) === JSON.stringify(b);
        expect(encode(a) === encode(b)).toBe(same);
        const parsed = parseStorageKey(encode(a));
        expect(parsed.resource).toBe(a.resource);
        expect(parsed.tenant).toBe(a.tenant);
        expect(parsed.part).toBe(a.part);
        expect(parsed.key).toBe(a.kind === 'tenant' ? '' : a.key);
        // The parts encode back to the same key: what the limiter derives its keys from.
        expect(storageKey(parsed)).toBe(encode(a));
      }),
      { numRuns: 2000 },
    );
  });

  it("keep an ordinary key's storage key, and escape only keys that start with a marker", () => {
    expect(resourceKey('api', '')).toBe('api');
    expect(resourceKey('api', 'tenant-a')).toBe('api|tenant-a');
    expect(resourceKey('api', 'a@b#1%|x')).toBe('api|a@b#1%|x');
    expect(resourceKey('api', '@acme')).toBe('api|%@acme');
    expect(resourceKey('api', '#0')).toBe('api|%#0');
    expect(resourceKey('api', '%')).toBe('api|%%');
    expect(tenantKey('api', 'acme')).toBe('api|@acme');
    expect(splitKey('api', '', 3)).toBe('api|#3');
    expect(splitKey('api', '@acme', 0)).toBe('api|#0|%@acme');
  });

  it('refuse to read what no encoder makes', () => {
    for (const bad of ['api|', 'api|%', 'api|%a', 'api|#', 'api|#01', 'api|#0|', 'api|#0|@x', 'api|#x']) {
      expect(() => parseStorageKey(bad), bad).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_KEY }));
    }
  });

  it("give normal traffic's pre-filter entry a namespace no storage key reaches", () => {
    fc.assert(
      fc.property(state, state, (a, b) => {
        expect(filterKey(encode(a), true)).not.toBe(filterKey(encode(b), false));
      }),
    );
  });
});

describe('well-formed strings', () => {
  it('refuse keys and tenants with a lone surrogate, and accept pairs and U+FFFD', () => {
    for (const lone of ['\ud800', '\udbff', '\udc00', '\udfff', 'a\ud800b', '\udc00\ud800']) {
      expect(() => checkKey(lone), JSON.stringify(lone)).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_KEY }));
      expect(isTenantName(lone)).toBe(false);
    }
    for (const ok of ['\ufffd', '\ud83d\ude00', 'a\ud800\udc00b', '']) expect(checkKey(ok)).toBe(ok);
  });
});
