/**
 * Outcomes reported by remote clients reach a fleet-wide breaker: two services share one Redis,
 * a client of the first reports failures of its downstream calls, and a client of the second is
 * refused (`circuit_open`) without calling the downstream; after the open duration a successful
 * probe closes the breaker for both.
 */
import { RemoteLimiter } from '@sluice/client';
import { isSluiceError } from '@sluice/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../../../test/env.js';
import { TOKEN, eventually, rulesFile, startServicePair, type ServicePair } from './support.js';

const RULES = `
resources:
  db:
    limits: { algorithm: gcra, limit: 10000, windowMs: 1000 }
    breaker: { scope: fleet, minimumCalls: 5, failureRateThreshold: 0.5, openDurationMs: 3000, halfOpenProbes: 1, syncMs: 50 }
`;

describe('a fleet breaker fed by remote clients', () => {
  const rules = rulesFile(RULES);
  const prefix = randomPrefix('client-breaker');
  let ca: RemoteLimiter;
  let cb: RemoteLimiter;
  let pair: ServicePair | undefined;

  beforeAll(async () => {
    // The services' data planes are open: reports take the admin token (a reporting credential).
    pair = await startServicePair(rules.path, prefix, { outcomeFlushMs: 20, logger: false, outcomesToken: TOKEN });
    ({ ca, cb } = pair);
  });
  afterAll(async () => {
    await pair?.close();
    rules.remove();
  });

  it("opens on one client's failures for every client, and closes after a good probe", async () => {
    const refused = (err: unknown) => isSluiceError(err, 'SLUICE_ERR_LIMITED') && err.decision?.reason === 'circuit_open';
    for (let i = 0; i < 6; i++) {
      await expect(ca.call('db', () => Promise.reject(new Error('db down')))).rejects.toThrow('db down');
    }
    let reached = 0;
    const callB = () =>
      cb.call('db', async () => {
        reached++;
        return 'ok';
      });
    // Client b's service learns of the open breaker from Redis: b's calls are refused, unrun.
    await eventually(() =>
      callB().then(
        () => false,
        (err: unknown) => refused(err),
      ),
    );
    const before = reached;
    await expect(callB()).rejects.toSatisfy(refused);
    expect(reached).toBe(before);
    // After the open duration a probe goes through and succeeds: closed for both clients.
    await eventually(
      async () =>
        await callB().then(
          () => true,
          () => false,
        ),
    );
    await eventually(async () => (await ca.call('db', async () => true).catch(() => false)) === true);
    expect(ca.outcomeStats.dropped + cb.outcomeStats.dropped).toBe(0);
  });
});
