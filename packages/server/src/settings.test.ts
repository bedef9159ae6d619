import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SETTINGS, SettingsError, loadSettings } from './settings.js';

describe('loadSettings', () => {
  it('fills every default without flags or environment', () => {
    const s = loadSettings({}, {});
    expect(s).toMatchObject({ port: 8080, grpcPort: 8081, host: '127.0.0.1', maxBodyBytes: 65536, maxBatch: 100, rules: [] });
    expect(s.redisUrl).toBeUndefined();
    expect(s.adminToken).toBeUndefined();
    expect(Object.isFrozen(s)).toBe(true);
  });

  it('reads the environment, and a flag wins over it', () => {
    const env = {
      SLUICE_PORT: '9000',
      SLUICE_GRPC_PORT: '9001',
      SLUICE_RULES: 'a.yaml, b.yaml',
      SLUICE_ADMIN_TOKEN: 'x'.repeat(16),
    };
    expect(loadSettings({}, env)).toMatchObject({
      port: 9000,
      grpcPort: 9001,
      rules: ['a.yaml', 'b.yaml'],
      adminToken: 'x'.repeat(16),
    });
    expect(loadSettings({ port: '7000', rules: ['c.yaml'] }, env)).toMatchObject({ port: 7000, rules: ['c.yaml'] });
  });

  it('refuses open outcome reports beside a data-plane or outcomes token', () => {
    expect(loadSettings({}, { SLUICE_OPEN_OUTCOMES: 'on' })).toMatchObject({ openOutcomes: true, maxOutcomeCalls: 1000 });
    expect(loadSettings({}, {}).openOutcomes).toBe(false);
    for (const env of [{ SLUICE_API_TOKEN: 'x'.repeat(16) }, { SLUICE_OUTCOMES_TOKEN: 'y'.repeat(16) }]) {
      expect(() => loadSettings({ openOutcomes: 'on' }, env)).toThrow(
        /--open-outcomes on opens outcome reports on an open data plane only/,
      );
    }
  });

  it('names the flag and the variable of a bad value', () => {
    expect(() => loadSettings({ port: '70000' }, {})).toThrow(SettingsError);
    expect(() => loadSettings({ port: 'abc' }, {})).toThrow(/--port \/ SLUICE_PORT: .*"abc"/);
    expect(() => loadSettings({}, { SLUICE_ADMIN_TOKEN: 'short' })).toThrow(
      /--admin-token \/ SLUICE_ADMIN_TOKEN: must be at least 16/,
    );
    expect(() => loadSettings({ redisUrl: 'localhost:6379' }, {})).toThrow(/--redis \/ SLUICE_REDIS_URL/);
    expect(() => loadSettings({ redisCluster: 'a:1,b' }, {})).toThrow(/must be host:port/);
    expect(() => loadSettings({ redisUrl: 'redis://a:1', redisCluster: 'a:1' }, {})).toThrow(/exclude each other/);
  });

  it('refuses a variable of 0.1 that was renamed, naming the new one', () => {
    expect(() => loadSettings({}, { SLUICE_ROLLOUT_LEASE_MS: '2000' })).toThrow(
      /SLUICE_ROLLOUT_LEASE_MS was renamed: use SLUICE_ROLLOUT_LEADERSHIP_MS/,
    );
    expect(loadSettings({}, { SLUICE_ROLLOUT_LEADERSHIP_MS: '2000' }).rolloutLeadershipMs).toBe(2000);
  });

  it('serves the dashboard unless --no-dashboard or SLUICE_DASHBOARD=off', () => {
    expect(loadSettings({}, {}).dashboard).toBe(true);
    expect(loadSettings({}, { SLUICE_DASHBOARD: 'off' }).dashboard).toBe(false);
    expect(loadSettings({ dashboard: 'off' }, { SLUICE_DASHBOARD: 'on' }).dashboard).toBe(false);
    expect(() => loadSettings({}, { SLUICE_DASHBOARD: 'no' })).toThrow(/--no-dashboard \/ SLUICE_DASHBOARD: must be on or off/);
  });

  it('reads the log format from --log-format or SLUICE_LOG_FORMAT, auto by default', () => {
    expect(loadSettings({}, {}).logFormat).toBe('auto');
    expect(loadSettings({}, { SLUICE_LOG_FORMAT: 'pretty' }).logFormat).toBe('pretty');
    expect(loadSettings({ logFormat: 'json' }, { SLUICE_LOG_FORMAT: 'pretty' }).logFormat).toBe('json');
    expect(() => loadSettings({}, { SLUICE_LOG_FORMAT: 'text' })).toThrow(
      /--log-format \/ SLUICE_LOG_FORMAT: must be auto, json or pretty \(got "text"\)/,
    );
  });

  it('gives every setting a distinct flag and SLUICE_ variable', () => {
    const specs = Object.values(SETTINGS);
    expect(new Set(specs.map((s) => s.env)).size).toBe(specs.length);
    expect(new Set(specs.map((s) => s.flag)).size).toBe(specs.length);
    for (const s of specs) expect(s.env).toMatch(/^SLUICE_[A-Z_]+$/);
  });
});

describe('the README settings table', () => {
  it('lists every setting with its flag, variable and default', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    for (const s of Object.values(SETTINGS)) {
      const row = readme.split('\n').find((l) => l.startsWith(`| \`${s.flag}\``));
      expect(row, s.flag).toBeDefined();
      expect(row).toContain(`\`${s.env}\``);
      expect(row).toContain(s.default === undefined ? '—' : `\`${s.default}\``);
    }
  });
});
