/* eslint-disable @typescript-eslint/no-explicit-any, @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-return --
   the assertions read protobuf answers dynamically */
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, call, eventually, reportOutcomes, scratch, startTestServer, writeRules, type TestServer } from './support.js';

const RULES = `
resources:
  db:
    limits: { algorithm: gcra, limit: 1000, windowMs: 1000 }
    breaker: { scope: fleet, minimumCalls: 4, failureRateThreshold: 0.5, openDurationMs: 600000, syncMs: 50 }
`;

describe('gRPC Outcomes/Report', () => {
  const tmp = scratch();
  let server: TestServer;
  // Reports need a credential; the admin token is one.
  const report = (outcomes: object[]): Promise<any> => reportOutcomes(server.grpcPort, outcomes, `Bearer ${TOKEN}`);

  beforeAll(async () => {
    server = await startTestServer({ rules: [writeRules(tmp.dir, RULES)], maxBatch: '5' });
  });
  afterAll(async () => {
    await server?.close();
    tmp.remove();
  });

  it('records outcomes one by one and opens the fleet breaker', async () => {
    const failed = { resource: 'db', ok: false, duration_ms: 7.5 };
    const r = await report([
      failed,
      { ...failed, count: 3 },
      { resource: 'nope', ok: true, duration_ms: 1 },
      { resource: 'db', ok: true, duration_ms: -1 },
    ]);
    expect(r.results.map((x: any) => x.recorded)).toEqual([true, true, false, false]);
    expect(r.results[2].error_code).toBe('SLUICE_ERR_UNKNOWN_RESOURCE');
    expect(r.results[3].error_code).toBe('SLUICE_ERR_INVALID_REQUEST');
    await eventually(async () => (await call(server.url, '/v1/breakers')).json.breakers[0]?.state === 'open');
    const b = await call(server.url, '/v1/breakers');
    expect(b.json.breakers[0].window).toMatchObject({ calls: 4, failures: 4 });
  });

  it('refuses a report over the batch bound', async () => {
    const r = await report(Array.from({ length: 6 }, () => ({ resource: 'db', ok: true, duration_ms: 1 })));
    expect(r.error.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(r.error.details).toContain('SLUICE_ERR_BATCH_TOO_LARGE');
  });
});
