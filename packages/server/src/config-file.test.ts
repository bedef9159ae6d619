import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_CONFIG_BYTES, effectiveConfig, readConfigFile } from './config-file.js';
import { REDACTED } from './logging.js';
import { SETTINGS, SettingsError, configKeyOf, loadSettings, type Settings } from './settings.js';

const dir = mkdtempSync(join(tmpdir(), 'sluice-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
function file(text: string): string {
  const path = join(dir, `config-${n++}.yaml`);
  writeFileSync(path, text);
  return path;
}
const load = (text: string, env: Record<string, string> = {}, flags = {}) => {
  const path = file(text);
  return loadSettings(flags, env, { path, values: readConfigFile(path) });
};

describe('the configuration file', () => {
  it('takes every setting under its flag name', () => {
    for (const name of Object.keys(SETTINGS) as (keyof Settings)[]) {
      expect(`--${configKeyOf(name)}`).toBe(SETTINGS[name].flag.replace('--no-', '--'));
    }
    const s = load(
      'port: 9000\ngrpc-port: 9001\nmax-batch: 50\nstore-timeout-ms: 250\ndashboard: false\non-store-failure: closed\n' +
        'rules: [a.yaml, /etc/sluice/b.yaml]\nredis-cluster:\n  - h1:7000\n  - h2:7000\n',
    );
    expect(s).toMatchObject({
      port: 9000,
      grpcPort: 9001,
      maxBatch: 50,
      storeTimeoutMs: 250,
      dashboard: false,
      onStoreFailure: 'closed',
    });
    expect(s.redisCluster).toEqual(['h1:7000', 'h2:7000']);
    // Relative rule paths are the file's neighbours, wherever the server starts.
    expect(s.rules).toEqual([join(dir, 'a.yaml'), '/etc/sluice/b.yaml']);
  });

  it('gives way to the environment, and the environment to a flag', () => {
    const text = 'port: 9000\nmax-batch: 50\nlog-level: debug\n';
    expect(load(text)).toMatchObject({ port: 9000, maxBatch: 50, logLevel: 'debug' });
    expect(load(text, { SLUICE_PORT: '9100' })).toMatchObject({ port: 9100, maxBatch: 50 });
    expect(load(text, { SLUICE_PORT: '9100' }, { port: '9200' })).toMatchObject({ port: 9200, maxBatch: 50 });
    // What none of them gives keeps its default.
    expect(load(text).grpcPort).toBe(8081);
  });

  it('refuses what it does not know, naming the file and the key', () => {
    const bad = (text: string) => {
      const path = file(text);
      try {
        loadSettings({}, {}, { path, values: readConfigFile(path) });
      } catch (err) {
        expect(err).toBeInstanceOf(SettingsError);
        return (err as Error).message.replace(path, 'FILE');
      }
      throw new Error(`accepted: ${text}`);
    };
    expect(bad('max-bach: 3\n')).toBe('FILE: max-bach: unknown setting (did you mean max-batch?)');
    expect(bad('maxBatch: 3\n')).toBe('FILE: maxBatch: unknown setting (did you mean max-batch?)');
    expect(bad('batch-size: 3\n')).toBe('FILE: batch-size: unknown setting');
    expect(bad('max_batch: 3\n')).toBe('FILE: max_batch: unknown setting (did you mean max-batch?)');
    expect(bad('max-batch: lots\n')).toMatch(/^FILE: max-batch: .* \(got "lots"\)$/);
    expect(bad('port: [1, 2]\n')).toBe('FILE: port: must be a single value, not a list');
    expect(bad('port: { a: 1 }\n')).toBe('FILE: port: must be a single value or a list');
    expect(bad('- port\n')).toBe('FILE: must be a mapping of settings (key: value)');
    expect(bad('port: 1\nport: 2\n')).toMatch(/^FILE: not valid YAML: /);
    expect(bad('base: &p 9000\n')).toBe('FILE: base: unknown setting');
    expect(bad(`admin-token: "${'x'.repeat(MAX_CONFIG_BYTES)}"\n`)).toBe(`FILE: larger than ${MAX_CONFIG_BYTES} bytes`);
    expect(() => readConfigFile(join(dir, 'missing.yaml'))).toThrow(/missing\.yaml: cannot be read \(ENOENT\)/);
  });

  it('reads an empty file as no settings', () => {
    expect(load('')).toMatchObject({ port: 8080 });
    expect(load('# nothing yet\n')).toMatchObject({ port: 8080 });
  });

  it('prints what is in force with every credential redacted', () => {
    const s = load(
      `admin-token: ${'a'.repeat(20)}\napi-token: ${'b'.repeat(20)}\noutcomes-token: ${'c'.repeat(20)}\n` +
        'redis: redis://user:hunter2@redis:6379/0\nport: 9000\n',
    );
    const printed = effectiveConfig(s);
    expect(printed).toMatchObject({
      'admin-token': REDACTED,
      'api-token': REDACTED,
      'outcomes-token': REDACTED,
      port: 9000,
      dashboard: true,
    });
    expect(printed.redis).toBe(`redis://${REDACTED}@redis:6379/0`);
    expect(JSON.stringify(printed)).not.toMatch(/hunter2|aaaa|bbbb|cccc/);
    // What it prints is a configuration file that gives the same settings back (secrets aside).
    const again = load(
      Object.entries(printed)
        .filter(([k]) => !k.endsWith('token') && k !== 'redis')
        .map(([k, v]) => `${k}: ${JSON.stringify(v)}`)
        .join('\n'),
    );
    expect(again.port).toBe(9000);
  });
});
