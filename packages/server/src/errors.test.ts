import { readFileSync } from 'node:fs';
import { ErrorCodes, SluiceError } from '@sluice/core';
import { RulesError, RulesErrorCodes } from '@sluice/rules';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ALL_ERROR_CODES, ServerError, ServerErrorCodes, describeError, fromZod, grpcStatusOf, httpStatusOf } from './errors.js';

describe('error codes', () => {
  it('maps every code of every package to a transport status', () => {
    const all = [...Object.values(ServerErrorCodes), ...Object.values(ErrorCodes), ...Object.values(RulesErrorCodes)];
    expect(new Set(ALL_ERROR_CODES)).toEqual(new Set(all));
    for (const code of all) {
      expect(httpStatusOf(code)).toBeGreaterThanOrEqual(400);
      expect(grpcStatusOf(code)).toBeGreaterThan(0);
    }
  });

  it('answers bad input with a 4xx and INVALID_ARGUMENT', () => {
    const input = ALL_ERROR_CODES.filter((c) => /INVALID|MALFORMED|COST_EXCEEDS/.test(c));
    expect(input.length).toBeGreaterThanOrEqual(8);
    for (const code of input) {
      expect(httpStatusOf(code)).toBe(400);
      expect(grpcStatusOf(code)).toBe(3);
    }
    expect(httpStatusOf('SLUICE_ERR_BODY_TOO_LARGE')).toBe(413);
    expect(httpStatusOf('SLUICE_ERR_UNKNOWN_RESOURCE')).toBe(404);
    expect(httpStatusOf('SLUICE_ERR_UNAUTHORIZED')).toBe(401);
    expect(grpcStatusOf('SLUICE_ERR_UNAUTHORIZED')).toBe(16);
    expect(httpStatusOf('SLUICE_ERR_RULE_CONFLICT')).toBe(409);
    for (const code of ALL_ERROR_CODES.filter((c) => c.startsWith('SLUICE_ERR_STORE_'))) {
      expect(httpStatusOf(code)).toBe(503);
      expect(grpcStatusOf(code)).toBe(14);
    }
  });

  it('documents every code in the package README with its HTTP status', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    for (const code of ALL_ERROR_CODES) {
      const row = readme.split('\n').find((l) => l.startsWith(`| \`${code}\``));
      expect(row, code).toBeDefined();
      expect(row).toContain(`| ${httpStatusOf(code)} `);
    }
  });
});

describe('describeError', () => {
  it('keeps the code, message and field of typed errors', () => {
    expect(describeError(new SluiceError(ErrorCodes.INVALID_KEY, 'key: too long', { field: 'key' }))).toEqual({
      body: { code: 'SLUICE_ERR_INVALID_KEY', message: 'key: too long', field: 'key' },
      internal: false,
    });
    expect(describeError(new ServerError(ServerErrorCodes.NOT_FOUND, 'no endpoint')).body).toEqual({
      code: 'SLUICE_ERR_NOT_FOUND',
      message: 'no endpoint',
    });
  });

  it('lists the issues of invalid rules', () => {
    const err = new RulesError(RulesErrorCodes.INVALID_RULES, 'r.yaml: resources.x.limits: bad', {
      issues: [{ file: 'r.yaml', path: 'resources.x.limits', message: 'bad' }],
    });
    const { body } = describeError(err);
    expect(body.code).toBe('SLUICE_ERR_INVALID_RULES');
    expect(body.field).toBe('resources.x.limits');
    expect(body.issues).toEqual([{ file: 'r.yaml', path: 'resources.x.limits', message: 'bad' }]);
  });

  it('hides the details of untyped faults', () => {
    expect(describeError(new TypeError('x is undefined'))).toEqual({
      body: { code: 'SLUICE_ERR_INTERNAL', message: 'internal error' },
      internal: true,
    });
  });

  it('names the first offending field of a zod failure', () => {
    const r = z.strictObject({ a: z.array(z.strictObject({ b: z.number() })) }).safeParse({ a: [{ b: 1 }, { b: 'x' }] });
    expect(r.success).toBe(false);
    const err = fromZod(r.error!);
    expect(err.code).toBe('SLUICE_ERR_INVALID_REQUEST');
    expect(err.field).toBe('a[1].b');
    expect(err.message).toMatch(/^a\[1\]\.b: /);
    expect(fromZod(r.error!, 'items[3]').field).toBe('items[3].a[1].b');
  });
});
