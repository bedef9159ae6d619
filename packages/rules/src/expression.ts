import { Environment, type ASTNode } from '@marcbachmann/cel-js';
import { RE2JS } from 're2js';

/**
 * Governance conditions in CEL, with bounds on what one evaluation can cost.
 *
 * - Size: at most {@link MAX_EXPRESSION_LENGTH} characters, {@link EXPRESSION_LIMITS} AST nodes,
 *   nesting, list and map literal sizes.
 * - No loops: the comprehension macros (`all`, `exists`, `exists_one`, `map`, `filter`) are
 *   refused, so every node of an expression is evaluated at most once and no value (a string,
 *   a list) can grow beyond what the expression's own literals spell out. One evaluation costs
 *   time linear in the expression's size.
 * - Regular expressions: `matches` runs on RE2 (the `re2js` port: linear in the input, as the
 *   CEL specification says), not on JavaScript's backtracking `RegExp`. Its pattern must be a
 *   string literal of at most {@link MAX_PATTERN_LENGTH} characters in RE2 syntax (no
 *   backreferences, no lookaround), compiled once when the rule is loaded.
 */

/** Longest CEL expression accepted, in characters. */
export const MAX_EXPRESSION_LENGTH = 1024;
/** Longest regular expression `matches` accepts, in characters. */
export const MAX_PATTERN_LENGTH = 256;
/** cel-js parser limits of a governance expression. */
export const EXPRESSION_LIMITS = Object.freeze({
  maxAstNodes: 256,
  maxDepth: 32,
  maxListElements: 64,
  maxMapEntries: 64,
  maxCallArguments: 8,
});

/**
 * The variables a governance expression sees, all about one value of the rule's dimension over
 * the rule's window (matching events only). Nothing else is reachable: no functions beyond
 * CEL's standard ones, no I/O, no loops.
 */
export const EXPRESSION_VARIABLES = Object.freeze({
  requests: 'int',
  errors: 'int',
  status2xx: 'int',
  status3xx: 'int',
  status4xx: 'int',
  status5xx: 'int',
  windowSeconds: 'double',
  rate: 'double',
} as const);

/** The values of {@link EXPRESSION_VARIABLES} for one evaluation. */
export interface ExpressionInput {
  readonly requests: bigint;
  readonly errors: bigint;
  readonly status2xx: bigint;
  readonly status3xx: bigint;
  readonly status4xx: bigint;
  readonly status5xx: bigint;
  readonly windowSeconds: number;
  readonly rate: number;
}

/** A checked expression: true when the rule fires. Throws when an evaluation fails. */
export type CompiledExpression = (input: ExpressionInput) => boolean;

const MACROS = new Set(['all', 'exists', 'exists_one', 'map', 'filter']);
// The name `matches` calls are evaluated under: cel-js's own `matches` uses RegExp and cannot
// be replaced, so compiled expressions call this one instead. Not a valid name in rule text
// (the validation environment does not know it).
const RE2_MATCHES = 'sluiceRe2Matches';

/** The environment every governance expression is checked in (and, with RE2, evaluated in). */
export function expressionEnvironment(): Environment {
  const env = new Environment({ limits: { ...EXPRESSION_LIMITS } });
  for (const [name, type] of Object.entries(EXPRESSION_VARIABLES)) env.registerVariable(name, type);
  return env;
}

type RCall = Extract<ASTNode, { op: 'rcall' }>;

function isNode(x: unknown): x is ASTNode {
  return typeof x === 'object' && x !== null && 'op' in x && 'args' in x;
}

/** Calls `visit` on every node of `ast`, outermost first. */
function walk(ast: unknown, visit: (node: ASTNode) => void): void {
  if (Array.isArray(ast)) {
    for (const x of ast) walk(x, visit);
    return;
  }
  if (!isNode(ast)) return;
  visit(ast);
  if (ast.op !== 'value') walk(ast.args, visit);
}

/** The literal pattern of a `matches` call, or why it cannot be run. */
function patternOf(call: RCall): { pattern: RE2JS } | { problem: string } {
  const [arg] = call.args[2];
  if (arg?.op !== 'value' || typeof arg.args !== 'string') {
    return { problem: 'the pattern of matches() must be a string literal (it is compiled once, when the rule is loaded)' };
  }
  const source = arg.args;
  if (source.length > MAX_PATTERN_LENGTH) {
    return { problem: `the pattern of matches() is ${source.length} characters, the bound is ${MAX_PATTERN_LENGTH}` };
  }
  try {
    return { pattern: RE2JS.compile(source) };
  } catch (e) {
    const why = e instanceof Error ? e.message.replace(/^error parsing regexp: /, '') : String(e);
    return {
      problem: `the pattern ${JSON.stringify(source)} of matches() is not RE2 syntax (${why}); backreferences and lookaround are not supported`,
    };
  }
}

/** Problems of the expression's shape: loops, and `matches` patterns RE2 cannot run. */
function shapeProblem(ast: ASTNode): string | undefined {
  let problem: string | undefined;
  walk(ast, (node) => {
    if (problem !== undefined || node.op !== 'rcall') return;
    const name = node.args[0];
    if (MACROS.has(name)) {
      problem = `${name}() is not allowed: governance expressions have no loops (all, exists, exists_one, map, filter), so one evaluation costs time linear in the expression`;
    } else if (name === 'matches') {
      const p = patternOf(node);
      if ('problem' in p) problem = p.problem;
    }
  });
  return problem;
}

let checkEnv: Environment | undefined;

function firstLine(e: unknown): string {
  // The library appends the expression with a caret on further lines; the first says why.
  return (e instanceof Error ? e.message : String(e)).split('\n')[0]!.trim();
}

/** Why a CEL expression cannot be a rule condition, or undefined when it can. */
export function expressionProblem(expression: string): string | undefined {
  if (expression.length > MAX_EXPRESSION_LENGTH) {
    return `is ${expression.length} characters, the bound is ${MAX_EXPRESSION_LENGTH}`;
  }
  checkEnv ??= expressionEnvironment();
  let result: { valid: boolean; type?: string; error?: { message: string } };
  try {
    result = checkEnv.check(expression);
  } catch (e) {
    result = { valid: false, error: { message: firstLine(e) } };
  }
  if (!result.valid) {
    const why = firstLine(result.error?.message ?? 'invalid');
    return `invalid CEL expression: ${why}; variables are ${Object.keys(EXPRESSION_VARIABLES).join(', ')}`;
  }
  if (result.type !== 'bool') return `must be a CEL expression of type bool, got ${result.type ?? 'unknown'}`;
  const shape = shapeProblem(checkEnv.parse(expression).ast);
  return shape === undefined ? undefined : `invalid CEL expression: ${shape}`;
}

/**
 * Compiles a governance condition for evaluation: checked as {@link expressionProblem} checks
 * it, its `matches` patterns compiled once with RE2. Throws an Error naming the problem when
 * the expression is not a valid condition.
 *
 * @example
 * const fires = compileExpression('errors > 20 && string(status5xx).matches("^[1-9][0-9]+$")');
 * fires({ requests: 100n, errors: 30n, status2xx: 70n, status3xx: 0n, status4xx: 0n, status5xx: 30n, windowSeconds: 1, rate: 100 });
 */
export function compileExpression(expression: string): CompiledExpression {
  const problem = expressionProblem(expression);
  if (problem !== undefined) throw new Error(problem);
  const env = expressionEnvironment();
  // Patterns are literals, so each call's pattern is known here: keyed by its source text.
  const patterns = new Map<string, RE2JS>();
  env.registerFunction(`string.${RE2_MATCHES}(string): bool`, (input: string, source: string) => {
    const re = patterns.get(source);
    if (re === undefined) throw new Error(`matches(): pattern ${JSON.stringify(source)} was not compiled`);
    return re.test(input);
  });
  const evaluate = env.parse(expression);
  walk(evaluate.ast, (node) => {
    if (node.op !== 'rcall' || node.args[0] !== 'matches') return;
    const p = patternOf(node);
    if ('problem' in p) throw new Error(p.problem);
    patterns.set(p.pattern.pattern(), p.pattern);
    // The AST is the library's own parse tree; renaming the call before it is type-checked
    // binds it to the RE2 function above.
    (node.args as unknown as [string, ...unknown[]])[0] = RE2_MATCHES;
  });
  const checked = evaluate.check();
  if (!checked.valid) throw new Error(`invalid CEL expression: ${firstLine(checked.error)}`);
  return (input) => evaluate(input) === true;
}
