import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { isMap, isScalar, isSeq, parseDocument } from 'yaml';
import { redactUrl, REDACTED } from './logging.js';
import { SETTINGS, SettingsError, configKeyOf, type SettingFlags, type Settings } from './settings.js';

/** Largest configuration file read (a settings file is a few hundred bytes). */
export const MAX_CONFIG_BYTES = 64 * 1024;

const BY_KEY = new Map((Object.keys(SETTINGS) as (keyof Settings)[]).map((name) => [configKeyOf(name), name] as const));

/** Every key of `SETTINGS` that holds a credential: printed redacted. */
const SECRET = new Set<keyof Settings>(['adminToken', 'apiToken', 'outcomesToken']);

/**
 * Reads `sluice serve`'s settings from a YAML file (`--config`): one mapping with the flags' names
 * as keys (see {@link configKeyOf}), scalars as values, and lists where a flag repeats or takes a
 * comma-separated list (`rules`, `redis-cluster`). An unknown key, a nested value or a file that
 * is not such a mapping is refused, naming the file and the key; the values are checked later,
 * with the flags' and variables', by `loadSettings`. Relative paths in it (`rules`, `rules-dir`)
 * are relative to the file's directory, not to where the server was started.
 */
export function readConfigFile(path: string): SettingFlags {
  let text: string;
  try {
    const buf = readFileSync(path);
    if (buf.byteLength > MAX_CONFIG_BYTES) throw new SettingsError(`${path}: larger than ${MAX_CONFIG_BYTES} bytes`);
    text = buf.toString('utf8');
  } catch (err) {
    if (err instanceof SettingsError) throw err;
    throw new SettingsError(`${path}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  // Values are read from the nodes, never expanded: an alias is refused as not a single value.
  const doc = parseDocument(text, { prettyErrors: false, uniqueKeys: true });
  const problem = doc.errors[0];
  if (problem !== undefined) throw new SettingsError(`${path}: not valid YAML: ${problem.message.split('\n')[0]}`);
  if (doc.contents === null) return {};
  if (!isMap(doc.contents)) throw new SettingsError(`${path}: must be a mapping of settings (key: value)`);
  const flags: SettingFlags = {};
  for (const pair of doc.contents.items) {
    const key = isScalar(pair.key) ? String(pair.key.value) : String(pair.key);
    const name = BY_KEY.get(key);
    if (name === undefined) {
      const near = [...BY_KEY.keys()].find((k) => distance(k, key.toLowerCase().replace(/_/g, '-')) <= 2);
      throw new SettingsError(`${path}: ${key}: unknown setting${near === undefined ? '' : ` (did you mean ${near}?)`}`);
    }
    const text = valueText(path, key, name, pair.value);
    flags[name] =
      name === 'rules' || name === 'rulesDir'
        ? text
            .split(',')
            .map((p) => resolve(dirname(path), p.trim()))
            .join(',')
        : text;
  }
  return flags;
}

function valueText(path: string, key: string, name: keyof Settings, node: unknown): string {
  const scalar = (n: unknown): string => {
    if (!isScalar(n) || n.value === null || typeof n.value === 'object') {
      throw new SettingsError(`${path}: ${key}: must be a single value${isSeq(n) ? '' : ' or a list'}`);
    }
    // The on/off settings take YAML's true/false as well.
    const v = n.value as string | number | boolean;
    if (typeof v === 'boolean') return v ? 'on' : 'off';
    return String(v);
  };
  if (isSeq(node)) {
    if (name !== 'rules' && name !== 'redisCluster')
      throw new SettingsError(`${path}: ${key}: must be a single value, not a list`);
    return node.items.map(scalar).join(',');
  }
  return scalar(node);
}

/**
 * The settings in force, as a configuration file would give them (the same keys), with every
 * credential and any password in a Redis URL replaced by `[REDACTED]`: what `--print-config`
 * prints.
 */
export function effectiveConfig(settings: Settings): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of Object.keys(SETTINGS) as (keyof Settings)[]) {
    const value = settings[name];
    if (value === undefined) {
      // A listener turned off is a choice to show; other unset settings have no value.
      if (name === 'port' || name === 'grpcPort') out[configKeyOf(name)] = 'off';
      continue;
    }
    if (SECRET.has(name)) out[configKeyOf(name)] = REDACTED;
    else if (name === 'redisUrl') out[configKeyOf(name)] = redactUrl(value);
    else out[configKeyOf(name)] = Array.isArray(value) ? [...(value as readonly string[])] : value;
  }
  return out;
}

/** Edit distance (insertions, deletions, substitutions) between two short strings. */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = row;
  }
  return prev[b.length]!;
}
