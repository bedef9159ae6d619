import { unwatchFile, watchFile } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { canonicalJson, compileRules, loadRuleFiles, type RuleStore, type RuleVersion } from '@sluice/rules';
import type { Logger } from 'pino';

/**
 * How `sluice serve` treats its rule files: `seed` makes them the first version of an empty
 * store and then leaves the store's versions alone (changes go through the admin API); `files`
 * makes them the source of truth: whenever their content differs from the version in force (at
 * start, on SIGHUP, when a file changes) it becomes a new version.
 */
export const RULES_MODES = ['seed', 'files'] as const;
export type RulesMode = (typeof RULES_MODES)[number];

/** The text a rule store is seeded with: one file as written, several merged into one. */
export async function seedText(files: readonly string[]): Promise<{ text: string; file: string }> {
  // Validates every file (all problems at once, each naming its file and path).
  const merged = await loadRuleFiles(files);
  if (files.length === 1) return { text: await readFile(files[0]!, 'utf8'), file: basename(files[0]!) };
  const doc = { resources: merged.resources, domains: Object.values(merged.domains).map((d) => d.toJSON()) };
  return { text: `${JSON.stringify(JSON.parse(canonicalJson(doc)), null, 2)}\n`, file: 'rules.json' };
}

/**
 * Makes the rule files the store's first version when it has none. A store that already has
 * versions keeps its current one (the files only seed): rules changed through the admin API
 * survive restarts.
 */
export async function seedRuleStore(store: RuleStore, files: readonly string[], logger: Logger): Promise<void> {
  if (files.length === 0) return;
  const { text, file } = await seedText(files);
  const current = await store.current();
  if (current !== undefined) {
    if (current.source !== text) {
      logger.warn(
        { version: current.version, files },
        'the rule files differ from the version in force and are ignored: they only seed an empty store (--rules-mode files makes them win)',
      );
    }
    return;
  }
  try {
    const v = await store.apply(text, {
      author: 'sluice serve',
      reason: `seeded from ${files.join(', ')}`,
      file,
      expectedVersion: 0,
    });
    logger.info({ version: v.version, files }, 'rule store seeded');
  } catch (err) {
    // Another server seeded it first: its version stands.
    if ((err as { code?: unknown }).code !== 'SLUICE_ERR_RULE_CONFLICT') throw err;
  }
}

/** What became of the rule files when they were compared with the version in force (`hash`: the files' content hash). */
export type FollowResult =
  | { readonly outcome: 'unchanged'; readonly version: number; readonly hash: string }
  | { readonly outcome: 'applied'; readonly version: number; readonly hash: string }
  /** Another server applied the same content first: its version stands. */
  | { readonly outcome: 'converged'; readonly version: number; readonly hash: string }
  /** The files hold what they held when last followed (`unlessHash`): the store was not read. */
  | { readonly outcome: 'same-files'; readonly hash: string };

/** How often a server looks again when others keep changing the store under it. */
const FOLLOW_ATTEMPTS = 5;

/**
 * Makes the rule files' content the version in force (`--rules-mode files`): nothing if the
 * current version already has their content hash, else a new version naming the files, with the
 * hash in its reason. Written with the current version as the expected one, so servers sharing
 * a store and the same files converge on one new version: the first writes it, the others find
 * it in place. Invalid files throw `SLUICE_ERR_INVALID_RULES` and change nothing.
 *
 * `unlessHash`: the content hash last followed. Files that still hash to it change nothing, so a
 * file seen changing twice (a write caught half done, an editor's two steps) does not undo an
 * admin change made in between: the files win when their content changes, or on SIGHUP.
 */
export async function followRuleFiles(
  store: RuleStore,
  files: readonly string[],
  logger: Logger,
  unlessHash?: string,
): Promise<FollowResult> {
  const { text, file } = await seedText(files);
  const hash = compileRules(text, { file }).hash;
  if (hash === unlessHash) return { outcome: 'same-files', hash };
  let current: RuleVersion | undefined;
  for (let attempt = 0; attempt < FOLLOW_ATTEMPTS; attempt++) {
    current = await store.current();
    if (current?.hash === hash) return { outcome: attempt === 0 ? 'unchanged' : 'converged', version: current.version, hash };
    try {
      const v = await store.apply(text, {
        author: `rule files: ${files.map((f) => basename(f)).join(', ')}`.slice(0, 256),
        reason: `content ${hash.slice(0, 16)} of ${files.join(', ')}`.slice(0, 256),
        file,
        expectedVersion: current?.version ?? 0,
      });
      logger.info({ version: v.version, files, hash, previous: current?.version }, 'rule files applied as a new version');
      return { outcome: 'applied', version: v.version, hash };
    } catch (err) {
      // Another server (or the admin API) made a version meanwhile: compare with that one.
      if ((err as { code?: unknown }).code !== 'SLUICE_ERR_RULE_CONFLICT') throw err;
    }
  }
  throw new Error(`the rule store kept changing while the rule files were applied (${FOLLOW_ATTEMPTS} attempts)`);
}

/**
 * Calls `onChange` when any of `files` changes on disk: polled (`fs.watchFile`), which follows
 * symbolic links, so a Kubernetes ConfigMap update (an atomic swap of a link) is seen too. Never
 * keeps the process alive. Returns the function that stops watching.
 */
export function watchRuleFiles(files: readonly string[], onChange: () => void, intervalMs = 1000): () => void {
  const listener = (
    now: { mtimeMs: number; ino: number; size: number },
    before: { mtimeMs: number; ino: number; size: number },
  ) => {
    if (now.mtimeMs !== before.mtimeMs || now.ino !== before.ino || now.size !== before.size) onChange();
  };
  for (const f of files) watchFile(f, { interval: intervalMs, persistent: false }, listener);
  return () => {
    for (const f of files) unwatchFile(f, listener);
  };
}
