import { readFile } from 'node:fs/promises';
import { hostname, userInfo } from 'node:os';
import { basename } from 'node:path';
import { formatIssue, isRulesError, loadRuleFiles, type RuleDiff, type RuleVersionMeta } from '@sluice/rules';
import { CliError, request } from './client.js';

/** Where the CLI writes; tests capture it. */
export interface Out {
  log(line: string): void;
}

/** Validates rule files offline; every problem is printed as `file: path: message`. */
export async function validateRules(files: readonly string[], out: Out): Promise<void> {
  try {
    const rules = await loadRuleFiles(files);
    const resources = Object.keys(rules.resources).length;
    const domains = Object.keys(rules.domains).length;
    out.log(`ok: ${files.join(', ')}: ${resources} resource(s), ${domains} envoy domain(s), hash ${rules.hash.slice(0, 12)}`);
  } catch (err) {
    if (isRulesError(err, 'SLUICE_ERR_INVALID_RULES')) throw new CliError(err.issues.map(formatIssue).join('\n'));
    throw err;
  }
}

/** How to reach a server's admin API. */
export interface AdminTarget {
  readonly server: string;
  readonly token: string | undefined;
}

/** `user@host`, the default author of a change. */
export function defaultAuthor(): string {
  let user = process.env.USER ?? 'unknown';
  try {
    user = userInfo().username;
  } catch {
    // No passwd entry (containers): keep $USER.
  }
  return `${user}@${hostname()}`;
}

function describe(v: RuleVersionMeta): string {
  const back = v.rolledBackFrom === undefined ? '' : ` (rollback to v${v.rolledBackFrom})`;
  return `v${v.version}  ${v.createdAt}  ${v.author}  ${v.reason}${back}`;
}

/** The text of a rule file, or a CliError naming it and why it could not be read. */
export async function readRuleFile(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    throw new CliError(`${file}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
}

/** Applies a rule file through a running server's admin API. */
export async function applyRules(
  t: AdminTarget,
  file: string,
  o: { author: string; reason: string; expectedVersion?: number },
  out: Out,
): Promise<void> {
  const text = await readRuleFile(file);
  const v = await request<RuleVersionMeta>(t.server, '/v1/admin/rules', {
    method: 'POST',
    token: t.token,
    body: {
      text,
      file: basename(file),
      author: o.author,
      reason: o.reason,
      ...(o.expectedVersion === undefined ? {} : { expectedVersion: o.expectedVersion }),
    },
  });
  out.log(`applied ${describe(v)}`);
}

/** Prints the difference between two versions (default: `from` against the current one). */
export async function diffRules(t: AdminTarget, from: number, to: number | undefined, out: Out): Promise<void> {
  const q = new URLSearchParams({ from: String(from), ...(to === undefined ? {} : { to: String(to) }) });
  const d = await request<RuleDiff>(t.server, `/v1/admin/rules/diff?${q.toString()}`, { token: t.token });
  if (d.same) {
    out.log(`v${d.from} and v${d.to} have the same rules`);
    return;
  }
  for (const [section, s] of [
    ['resources', d.resources],
    ['domains', d.domains],
  ] as const) {
    for (const n of s.added) out.log(`+ ${section} ${n}`);
    for (const n of s.removed) out.log(`- ${section} ${n}`);
    for (const c of s.changed) out.log(`~ ${section} ${c.name}: ${c.changes.map((x) => x.path).join(', ')}`);
  }
  if (d.text !== '') out.log(d.text.trimEnd());
}

/** Prints the most recent versions, newest first. */
export async function ruleHistory(t: AdminTarget, limit: number | undefined, out: Out): Promise<void> {
  const q = limit === undefined ? '' : `?limit=${limit}`;
  const h = await request<{ versions: RuleVersionMeta[] }>(t.server, `/v1/admin/rules/history${q}`, { token: t.token });
  if (h.versions.length === 0) out.log('no versions yet');
  for (const v of h.versions) out.log(describe(v));
}

/** Makes a new version with the content of `version`. */
export async function rollbackRules(
  t: AdminTarget,
  version: number,
  o: { author: string; reason: string; expectedVersion?: number },
  out: Out,
): Promise<void> {
  const v = await request<RuleVersionMeta>(t.server, '/v1/admin/rules/rollback', {
    method: 'POST',
    token: t.token,
    body: {
      version,
      author: o.author,
      reason: o.reason,
      ...(o.expectedVersion === undefined ? {} : { expectedVersion: o.expectedVersion }),
    },
  });
  out.log(`rolled back: ${describe(v)}`);
}

/** Prints a version's text (default: the current one). */
export async function showRules(t: AdminTarget, version: number | undefined, out: Out): Promise<void> {
  const q = version === undefined ? '' : `?version=${version}`;
  const v = await request<RuleVersionMeta & { source: string }>(t.server, `/v1/admin/rules${q}`, { token: t.token });
  out.log(`# ${describe(v)}`);
  out.log(v.source.trimEnd());
}
