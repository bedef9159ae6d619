import { describe, expect, it } from 'vitest';
import {
  MAX_EXPRESSION_LENGTH,
  MAX_PATTERN_LENGTH,
  compileExpression,
  expressionProblem,
  type ExpressionInput,
} from './index.js';

const INPUT: ExpressionInput = {
  requests: 12n,
  errors: 0n,
  status2xx: 12n,
  status3xx: 0n,
  status4xx: 0n,
  status5xx: 0n,
  windowSeconds: 1,
  rate: 12,
};

/** `"aaa…a!".matches("^(a+)+$")` with `length` characters in the string. */
const catastrophic = (length: number) => `"${'a'.repeat(length - 1)}!".matches("^(a+)+$")`;

describe('matches() runs on RE2', () => {
  it('answers a pattern that backtracks exponentially in JavaScript', () => {
    // RegExp needs seconds at 26 characters and hours at 900; RE2 is linear in the input.
    for (const length of [26, 30, 900]) {
      expect(expressionProblem(catastrophic(length))).toBeUndefined();
      expect(compileExpression(catastrophic(length))(INPUT)).toBe(false);
    }
    expect(compileExpression(`"${'a'.repeat(900)}".matches("^(a+)+$")`)(INPUT)).toBe(true);
  });

  it('has RE2 semantics, not JavaScript ones', () => {
    // RE2 flag groups and \z (end of text); JavaScript's RegExp refuses the first and reads \z as "z".
    expect(compileExpression('"ABC".matches("(?i)^abc$")')(INPUT)).toBe(true);
    expect(compileExpression('"abc".matches("c\\\\z")')(INPUT)).toBe(true);
    expect(compileExpression('"cz".matches("c\\\\z")')(INPUT)).toBe(false);
    // A partial match, as CEL's matches is.
    expect(compileExpression('string(requests).matches("^1[0-9]$") && "xay".matches("a")')(INPUT)).toBe(true);
  });

  it('refuses backreferences and lookaround at validation, with the reason', () => {
    expect(expressionProblem('"aa".matches("(a)\\\\1")')).toBe(
      'invalid CEL expression: the pattern "(a)\\\\1" of matches() is not RE2 syntax (invalid escape sequence: `\\1`); backreferences and lookaround are not supported',
    );
    expect(expressionProblem('"ab".matches("a(?=b)")')).toMatch(
      /^invalid CEL expression: the pattern "a\(\?=b\)" of matches\(\) is not RE2 syntax \(invalid or unsupported Perl syntax/,
    );
    expect(() => compileExpression('"aa".matches("(a)\\\\1")')).toThrow(/not RE2 syntax/);
  });

  it('takes only literal patterns of bounded length', () => {
    expect(expressionProblem('"12".matches(string(requests))')).toBe(
      'invalid CEL expression: the pattern of matches() must be a string literal (it is compiled once, when the rule is loaded)',
    );
    expect(expressionProblem(`"a".matches("${'a'.repeat(MAX_PATTERN_LENGTH)}")`)).toBeUndefined();
    expect(expressionProblem(`"a".matches("${'a'.repeat(MAX_PATTERN_LENGTH + 1)}")`)).toBe(
      `invalid CEL expression: the pattern of matches() is ${MAX_PATTERN_LENGTH + 1} characters, the bound is ${MAX_PATTERN_LENGTH}`,
    );
  });
});

describe('the cost of one evaluation is bounded', () => {
  it('refuses loops: nested comprehensions would multiply their lists', () => {
    for (const macro of ['all', 'exists', 'exists_one', 'filter', 'map']) {
      const call = `[1, 2].${macro}(x, ${macro === 'map' ? 'x' : 'x > 1'})`;
      const when = ['map', 'filter'].includes(macro) ? `size(${call}) > 0` : `${call} || true`;
      expect(expressionProblem(when)).toBe(
        `invalid CEL expression: ${macro}() is not allowed: governance expressions have no loops (all, exists, exists_one, map, filter), so one evaluation costs time linear in the expression`,
      );
    }
    // Inside another call, too.
    expect(expressionProblem('requests > 1 && [1].all(a, [1].exists(b, a == b))')).toMatch(/all\(\) is not allowed/);
  });

  it('bounds the expression, its nodes, nesting and literals', () => {
    expect(expressionProblem(`requests > 0${' '.repeat(MAX_EXPRESSION_LENGTH)}`)).toBe(
      `is ${MAX_EXPRESSION_LENGTH + 12} characters, the bound is ${MAX_EXPRESSION_LENGTH}`,
    );
    expect(expressionProblem(Array.from({ length: 100 }, () => '1 < 2').join('||'))).toMatch(
      /^invalid CEL expression: .*maxAstNodes/,
    );
    expect(expressionProblem(`size([${Array.from({ length: 65 }, (_, i) => i).join(', ')}]) > 0`)).toMatch(
      /^invalid CEL expression: .*maxListElements/,
    );
    expect(expressionProblem(`${'('.repeat(40)}true${')'.repeat(40)}`)).toMatch(/^invalid CEL expression: .*maxDepth/);
  });

  it('reports an evaluation error by throwing, for the aggregator to count', () => {
    const fires = compileExpression('errors / errors > 1');
    expect(() => fires(INPUT)).toThrow(/division by zero/);
    expect(() => compileExpression('now() > 1')).toThrow(/^invalid CEL expression: /);
  });
});
