import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { canonicalJson, loadRuleFiles, type RuleStore } from '@sluice/rules';
import type { Logger } from 'pino';

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
      logger.info(
        { version: current.version, files },
        'the rule store already has versions; the rule files only seed an empty store',
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
