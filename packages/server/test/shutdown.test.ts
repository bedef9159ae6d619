/* eslint-disable @typescript-eslint/no-unsafe-return --
   the assertions read parsed JSON and protobuf answers dynamically */
import { afterAll, describe, expect, it } from 'vitest';
import { call, eventually, scratch, spawnServer, writeRules } from './support.js';

// One permit every 300 ms: queued acquires are served one after another.
const RULES = `
resources:
  api:paced: { limits: { algorithm: gcra, limit: 1, windowMs: 300, burst: 1 } }
  db:pool: { limits: { algorithm: concurrency, limit: 1, permitTtlMs: 600000 } }
`;

/** True once the server answers 503 on /readyz (it is shutting down) or not at all. */
async function notReady(url: string): Promise<boolean> {
  try {
    return (await call(url, '/readyz')).status === 503;
  } catch {
    return true;
  }
}

describe('graceful shutdown of sluice serve', () => {
  const tmp = scratch();
  afterAll(() => tmp.remove());

  it('answers in-flight acquire calls with decisions, then exits 0', async () => {
    const server = await spawnServer(['--rules', writeRules(tmp.dir, RULES, 'a.yaml'), '--rules-dir', `${tmp.dir}/a`]);
    const first = await call(server.url, '/v1/acquire', { resource: 'api:paced', key: 'k' });
    expect(first.json.allowed).toBe(true);
    // Three callers queue behind the first; serving them takes about a second.
    const waiting = [1, 2, 3].map(() => call(server.url, '/v1/acquire', { resource: 'api:paced', key: 'k', maxWaitMs: 20_000 }));
    await new Promise((r) => setTimeout(r, 100));
    const exited = server.stop('SIGTERM');
    const answers = await Promise.all(waiting);
    expect(answers.map((a) => [a.status, a.json.allowed])).toEqual([
      [200, true],
      [200, true],
      [200, true],
    ]);
    expect(await exited).toBe(0);
    expect(server.logs.some((l) => l.includes('"msg":"shut down"'))).toBe(true);
  });

  it('ends waits that outlast the grace period with SLUICE_ERR_CLOSED, then exits 0', async () => {
    const server = await spawnServer([
      '--rules',
      writeRules(tmp.dir, RULES, 'b.yaml'),
      '--rules-dir',
      `${tmp.dir}/b`,
      '--shutdown-grace-ms',
      '300',
    ]);
    expect((await call(server.url, '/v1/acquire', { resource: 'db:pool' })).json.allowed).toBe(true);
    // The only permit is held and never released: this caller waits up to 30 s.
    const waiting = call(server.url, '/v1/acquire', { resource: 'db:pool', maxWaitMs: 30_000 });
    await new Promise((r) => setTimeout(r, 100));
    const exited = server.stop('SIGTERM');
    await eventually(() => notReady(server.url));
    const answer = await waiting;
    expect(answer.status).toBe(503);
    expect(answer.json.error.code).toBe('SLUICE_ERR_CLOSED');
    expect(await exited).toBe(0);
  });
});
