import { RemoteLimiter, type RemoteLimiterOptions } from '@sluice/client';
import { redisUrl } from '../../../test/env.js';
import { TOKEN, spawnServe, type Serve } from '../../../test/sluice-serve.js';

export { SLUICE_BIN, TOKEN, rulesFile, spawnServe, type Serve } from '../../../test/sluice-serve.js';
export { clearOfWindowEnd } from '../../../test/wait-for.js';

/** Applies a rule text through the admin API; resolves to the new version. */
export async function applyRules(url: string, text: string): Promise<number> {
  const res = await fetch(new URL('/v1/admin/rules', url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({ text, author: 'test', reason: 'client test' }),
  });
  const body = (await res.json()) as { version?: number };
  if (res.status !== 201 || body.version === undefined)
    throw new Error(`rules not applied: ${res.status} ${JSON.stringify(body)}`);
  return body.version;
}

/** Polls `probe` until true; the timeout bounds a hang, it is not a timed assertion. */
export async function eventually(probe: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error('condition not met before the deadline');
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Handles that keep a process alive, by kind (sockets, timers, ...). */
export function liveHandles(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const kind of process.getActiveResourcesInfo()) counts[kind] = (counts[kind] ?? 0) + 1;
  return counts;
}

/** Two `sluice serve` processes sharing one Redis, each with a remote client of its own. */
export interface ServicePair {
  readonly a: Serve;
  readonly b: Serve;
  readonly ca: RemoteLimiter;
  readonly cb: RemoteLimiter;
  /** Closes both clients, then stops both services. */
  close(): Promise<void>;
}

/**
 * Starts two services on the rule file at `rules`, under `prefix` on the tests' Redis, one
 * after the other (the first seeds the shared rule store), and a ready client of each.
 */
export async function startServicePair(
  rules: string,
  prefix: string,
  client: Omit<RemoteLimiterOptions, 'url'> = {},
): Promise<ServicePair> {
  const a = await spawnServe({ rules, redis: redisUrl(), prefix });
  const b = await spawnServe({ rules, redis: redisUrl(), prefix });
  const ca = new RemoteLimiter({ url: a.url, checkTimeoutMs: 2000, ...client });
  const cb = new RemoteLimiter({ url: b.url, checkTimeoutMs: 2000, ...client });
  const close = async () => {
    await Promise.all([ca.close(), cb.close()]);
    await Promise.all([a.stop(), b.stop()]);
  };
  if (!(await ca.ready()) || !(await cb.ready())) {
    await close();
    throw new Error('the remote clients did not become ready');
  }
  return { a, b, ca, cb, close };
}
