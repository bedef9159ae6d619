/* eslint-disable @typescript-eslint/no-explicit-any --
   the assertions read parsed JSON answers dynamically */
/**
 * Admin input that cannot hang the fleet, against the real service (`sluice serve`, built CLI)
 * on the embedded store and on Redis: a governance expression with a catastrophic regular
 * expression is evaluated on RE2 by the aggregators that follow the server's rule store (a
 * backreference is refused when applied), and decisions go on while a rule text near the
 * 1 MiB bound is parsed and compiled.
 */
import { Aggregator, MemoryOwnershipStore } from '@sluice/governance';
import { FileRuleStore, MAX_RULES_BYTES, RedisRuleStore, type RuleStore } from '@sluice/rules';
import { MemoryTransport, encodeEvents, hashValue, EventOutcome, type GovernanceDecision } from '@sluice/stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisUrl } from '../env.js';
import { TOKEN, deleteRedisKeys, rulesFile, spawnSluice, storeFlags, type Serve, type TestStore } from '../sluice-serve.js';

const BASE = 'resources:\n  api:\n    limits: { algorithm: fixed-window, limit: 1000000000, windowMs: 60000 }\n';
/** `"aaa…a!".matches("^(a+)+$")`: JavaScript's RegExp backtracks for hours on 900 characters. */
const CATASTROPHIC = `"${'a'.repeat(899)}!".matches("^(a+)+$")`;

const governance = (when: string) =>
  `${BASE}governance:\n  rules:\n    busy-path:\n      type: expression\n      dimension: path\n      when: '${when}'\n`;

/** A native rule text just under `bytes`: `api` and as many filler resources as fit. */
function largeRules(bytes: number, round: number): string {
  const parts = [BASE];
  let size = BASE.length;
  for (let i = 0; ; i++) {
    const r = `  filler-${i}:\n    limits:\n      - { algorithm: gcra, limit: ${1000 + i + round}, windowMs: 60000, burst: 50 }\n`;
    if (size + r.length > bytes) break;
    parts.push(r);
    size += r.length;
  }
  return parts.join('');
}

async function post(url: string, path: string, body: object, token?: string): Promise<{ status: number; json: any }> {
  const res = await fetch(new URL(path, url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

const apply = (serve: Serve, text: string, reason: string) =>
  post(serve.url, '/v1/admin/rules', { text, author: 'test', reason }, TOKEN);

describe.each<TestStore>(['memory', 'redis'])('admin input on the %s store', (store) => {
  const prefix = randomPrefix('admin-input');
  const rules = rulesFile(BASE);
  let serve: Serve;

  beforeAll(async () => {
    serve = await spawnSluice(['--rules', rules.path, '--port', '0', '--grpc-port', '0', ...storeFlags(store, prefix)]);
  });

  afterAll(async () => {
    await serve?.stop();
    rules.remove();
    if (store === 'redis') await deleteRedisKeys(prefix);
  });

  it('takes a catastrophic regex that the aggregators evaluate on RE2, and refuses a backreference', async () => {
    const refused = await apply(serve, governance('string(requests).matches("^(1+)\\\\1$")'), 'backreference');
    expect(refused.status).toBe(400);
    expect(refused.json.error.code).toBe('SLUICE_ERR_INVALID_RULES');
    expect(refused.json.error.message).toContain('governance.rules.busy-path.when: invalid CEL expression: the pattern');
    expect(refused.json.error.message).toContain('is not RE2 syntax');

    const applied = await apply(serve, governance(`${CATASTROPHIC} || requests > 3`), 'catastrophic regex');
    expect(applied.status).toBe(201);

    // An aggregator that follows the server's rule store evaluates the expression each tick:
    // on a backtracking engine its first tick would not end.
    const ruleStore: RuleStore =
      store === 'memory' ? new FileRuleStore({ dir: `${rules.path}.versions` }) : new RedisRuleStore({ url: redisUrl(), prefix });
    const transport = new MemoryTransport({ partitions: 1 });
    const aggregator = new Aggregator({
      transport,
      rules: ruleStore,
      ownership: new MemoryOwnershipStore(),
      tickMs: 60_000,
      snapshotMs: 0,
    });
    try {
      await aggregator.start();
      const path = hashValue('/busy');
      const event = () => ({
        resource: hashValue('api'),
        path,
        user: 0,
        ip: 0,
        tenant: 0,
        status: 200,
        outcome: EventOutcome.PASSED,
      });
      let decisions: GovernanceDecision[] = [];
      for (let i = 0; i < 300 && decisions.length === 0; i++) {
        await transport.publish(0, encodeEvents(Array.from({ length: 5 }, () => ({ ...event(), timestampMs: Date.now() }))));
        await new Promise((r) => setTimeout(r, 100));
        decisions = await aggregator.tick();
      }
      expect(decisions.map((d) => [d.ruleId, d.action, d.value])).toEqual([['busy-path', 'block', path]]);
      expect(aggregator.stats().expressionErrors).toBe(0);
    } finally {
      await aggregator.close();
      await transport.close();
      await ruleStore.close();
    }
  });

  it('answers decisions while a rule text near the 1 MiB bound is parsed and compiled', async () => {
    const decide = () => post(serve.url, '/v1/check', { resource: 'api', key: 'k' });
    expect((await decide()).status).toBe(200);
    const text = largeRules(MAX_RULES_BYTES - 1024, 0);
    let applying = true;
    let during = 0;
    let failed = 0;
    const loop = (async () => {
      while (applying) {
        const answer = await decide();
        if (answer.status !== 200) failed++;
        if (applying) during++;
      }
    })();
    const applied = await apply(serve, text, 'large');
    applying = false;
    await loop;
    expect(applied.status).toBe(201);
    expect(failed).toBe(0);
    // Compiling the text takes seconds of CPU; one closed-loop client gets thousands of
    // answers meanwhile when that work is off the event loop, and a few dozen (those slipping
    // through the apply's own I/O) when it is not.
    expect(during).toBeGreaterThan(100);
    const after = await decide();
    expect(after.status).toBe(200);
    // Compiling takes tens of seconds on a busy machine; the bound is for a hang, not a figure.
  }, 240_000);
});
