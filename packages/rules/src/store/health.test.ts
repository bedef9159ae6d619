import { setImmediate as turn } from 'node:timers/promises';
import type { Logger } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { storeUnavailable } from '../errors.js';
import { RuleStoreHealth } from './health.js';
import type { RuleVersion } from './types.js';
import { VersionWatch } from './watch.js';

function recording() {
  const lines: { level: string; fields: object; msg: string }[] = [];
  const logger: Logger = {
    info: (fields, msg) => lines.push({ level: 'info', fields, msg }),
    warn: (fields, msg) => lines.push({ level: 'warn', fields, msg }),
  };
  return { lines, logger };
}

const refused = () =>
  storeUnavailable(
    'read the current version',
    Object.assign(new Error('connect ECONNREFUSED 10.0.0.5:6379'), {
      code: 'ECONNREFUSED',
      syscall: 'connect',
      address: '10.0.0.5',
      port: 6379,
    }),
  );

describe('a rule store that stops answering', () => {
  it('is one line when its watch starts failing and one when it answers again, not one per poll', async () => {
    const { lines, logger } = recording();
    const health = new RuleStoreHealth(logger, 'rule store redis at 10.0.0.5:6379');
    let away = false;
    const seen: number[] = [];
    const watch = new VersionWatch(
      {
        readCurrent: () => (away ? Promise.reject(refused()) : Promise.resolve(1)),
        load: (v) => Promise.resolve({ version: v } as RuleVersion),
      },
      60_000,
      health,
      logger,
    );
    watch.add((v) => seen.push(v.version));
    await turn();
    away = true;
    for (let i = 0; i < 10; i++) {
      watch.kick();
      await turn();
    }
    expect(health.failing).toBe(true);
    away = false;
    watch.kick();
    await turn();
    await watch.close();
    health.close();
    expect(seen).toEqual([1]);
    expect(lines.map((l) => `${l.level} ${l.msg}`)).toEqual([
      'warn rule store redis at 10.0.0.5:6379 unreachable (ECONNREFUSED 10.0.0.5:6379): the rules and the rollout in force stay until it answers',
      expect.stringMatching(
        /^info rule store redis at 10\.0\.0\.5:6379 answers again after \d+\.\d s: rule changes are followed again \(9 more failures meanwhile\)$/,
      ),
    ]);
    expect(lines[0]!.fields).toMatchObject({
      event: 'rule_store_unreachable',
      error: { code: 'SLUICE_ERR_RULE_STORE_UNAVAILABLE', cause: 'ECONNREFUSED 10.0.0.5:6379' },
    });
    expect(JSON.stringify(lines)).not.toContain('    at ');
  });
});
