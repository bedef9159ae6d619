/**
 * Connections answered on the HTTP listener's client-error path (a malformed request: 400; a
 * request not received in time: 408) must give back their socket, their file descriptor and
 * their place in the connection caps, whatever the peer does after the answer: thousands of
 * them, from one address and from many, must leave the real `sluice serve` (the built CLI, so
 * `npm run build` first) serving every address, on the embedded store and on Redis. What is
 * asserted is what the process holds afterwards (its open descriptors, `sluice_connections_open`)
 * and who is answered, never a duration.
 */
import { readdirSync } from 'node:fs';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../env.js';
import { rulesFile, spawnSluice, storeFlags, type Serve, type TestStore, metric } from '../sluice-serve.js';

const RULES = `
resources:
  api:fixed: { limits: { algorithm: fixed-window, limit: 1000000, windowMs: 60000 } }
  api:counted: { limits: { algorithm: fixed-window, limit: 100, windowMs: 600000 } }
`;

const BODY_TIMEOUT_MS = 1000;
/** Small caps, so that a leak fills them within a test: the attacks below send several times more. */
const CLIENT_CONNS = 100;
const MAX_CONNS = 400;
/** A bound on a hang, not an expected duration. */
const GUARD_MS = 30_000;

/** What one raw connection got: the status of its first answer (0: none) and whether it closed. */
interface Outcome {
  readonly status: number;
  readonly closed: boolean;
}

/**
 * Opens a connection from `localAddress`, writes `payload`, and waits for an answer. With
 * `holdOpen`, the peer never closes its side (not even after the server's FIN) and keeps
 * writing: only the server can end the connection. Resolves at the first answer (`holdOpen`) or
 * when the connection closes.
 */
function attack(port: number, payload: string, localAddress: string, holdOpen: boolean): Promise<Outcome> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress, allowHalfOpen: holdOpen });
    let data = '';
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(guard);
      const m = /^HTTP\/1\.1 (\d{3})/.exec(data);
      resolve({ status: m === null ? 0 : Number(m[1]), closed });
      if (!holdOpen) socket.destroy();
    };
    const guard = setTimeout(() => finish(false), GUARD_MS);
    socket.setEncoding('utf8');
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
    socket.on('data', (chunk: string) => {
      data += chunk;
      if (holdOpen && /\r\n\r\n/.test(data)) {
        // Answered: keep sending bytes the server no longer parses, and never close.
        if (!socket.destroyed) socket.write('more bytes after the answer\r\n');
        finish(false);
      }
    });
    if (payload !== '') socket.write(payload);
    held.push(socket);
  });
}

/** Sockets of `holdOpen` attacks, destroyed after each test. */
const held: ReturnType<typeof connect>[] = [];

/** Runs `count` attacks spread over `addresses`, `concurrency` at a time; their outcomes. */
async function flood(
  port: number,
  count: number,
  addresses: readonly string[],
  payload: string,
  options: { concurrency?: number; holdOpen?: boolean } = {},
): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      outcomes.push(await attack(port, payload, addresses[i % addresses.length]!, options.holdOpen ?? false));
    }
  };
  await Promise.all(Array.from({ length: options.concurrency ?? 50 }, worker));
  return outcomes;
}

/** How many of each status the outcomes got. */
function tally(outcomes: readonly Outcome[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const o of outcomes) counts[o.status] = (counts[o.status] ?? 0) + 1;
  return counts;
}

async function until(probe: () => Promise<boolean> | boolean, what: string): Promise<void> {
  const deadline = Date.now() + GUARD_MS;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A check over a connection of its own from `localAddress`: its status (0 if refused). */
function check(port: number, localAddress: string): Promise<number> {
  const body = JSON.stringify({ resource: 'api:fixed', key: 'k' });
  const wire = `POST /v1/check HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
  return attack(port, wire, localAddress, false).then((o) => o.status);
}

const MALFORMED = 'GET / HTTP/1.1\r\nBad Header: y\r\n\r\n';
/** A request head that never ends: answered 408 after the body timeout. */
const STALLED = 'POST /v1/check HTTP/1.1\r\nHost: sluice\r\nContent-Length: 10\r\n';
const ADDRESSES = Array.from({ length: 10 }, (_, i) => `127.0.1.${i + 1}`);

describe.each<TestStore>(['memory', 'redis'])('client-error answers give their sockets back (%s store)', (store) => {
  const rules = rulesFile(RULES);
  let serve: Serve;
  let port: number;
  let baseline: number;
  const openFds = () => readdirSync(`/proc/${serve.child.pid}/fd`).length;
  /** The service holds no more than it did at rest: descriptors and open HTTP connections. */
  const atRest = () =>
    until(
      async () => openFds() <= baseline + 5 && (await metric(serve.url, 'sluice_connections_open', 'listener="http"')) <= 2,
      'the attacks’ sockets to be closed',
    );

  beforeAll(async () => {
    serve = await spawnSluice(['--rules', rules.path, ...storeFlags(store)], {
      SLUICE_SHUTDOWN_GRACE_MS: '500',
      SLUICE_BODY_TIMEOUT_MS: String(BODY_TIMEOUT_MS),
      SLUICE_MAX_CLIENT_CONNS: String(CLIENT_CONNS),
      SLUICE_MAX_CONNECTIONS: String(MAX_CONNS),
    });
    port = Number(new URL(serve.url).port);
    expect(await check(port, '127.0.0.1')).toBe(200);
    baseline = openFds();
  });
  afterAll(async () => {
    for (const s of held) s.destroy();
    await serve?.stop();
    rules.remove();
  });

  it('answers 2,000 malformed requests from one address 400 each, and keeps serving it', async () => {
    const outcomes = await flood(port, 2000, ['127.0.0.5'], MALFORMED);
    expect(tally(outcomes)).toEqual({ 400: 2000 });
    await atRest();
    expect(await check(port, '127.0.0.5')).toBe(200);
  });

  it('answers 5,000 malformed requests from ten addresses, and keeps serving every address', async () => {
    const outcomes = await flood(port, 5000, ADDRESSES, MALFORMED, { concurrency: 100 });
    expect(tally(outcomes)).toEqual({ 400: 5000 });
    await atRest();
    for (const address of [...ADDRESSES, '127.0.2.1']) expect(await check(port, address)).toBe(200);
  });

  it('cuts peers that never close after their 400, and keeps serving their address', async () => {
    // As many peers as the address's cap, each holding its connection open and writing after its answer.
    const outcomes = await flood(port, CLIENT_CONNS, ['127.0.0.6'], MALFORMED, { concurrency: 20, holdOpen: true });
    expect(tally(outcomes)).toEqual({ 400: CLIENT_CONNS });
    await atRest();
    expect(await check(port, '127.0.0.6')).toBe(200);
    expect(await metric(serve.url, 'sluice_connections_closed_total', 'reason="malformed_request"')).toBeGreaterThanOrEqual(
      7000 + CLIENT_CONNS,
    );
  });

  it('answers slow requests 408 from many addresses, cuts those that stay open, and keeps serving', async () => {
    // Twice the listener's total cap in stalled requests, half of them never closing (at most
    // about 200 held at once: within the caps, which only a leak would fill).
    const [closing, staying] = await Promise.all([
      flood(port, MAX_CONNS, ADDRESSES, STALLED, { concurrency: 60 }),
      flood(port, MAX_CONNS, ADDRESSES, STALLED, { concurrency: 60, holdOpen: true }),
    ]);
    expect(tally(closing)).toEqual({ 408: MAX_CONNS });
    expect(tally(staying)).toEqual({ 408: MAX_CONNS });
    await atRest();
    for (const address of ADDRESSES) expect(await check(port, address)).toBe(200);
  });

  it('decides nothing a peer sends after its 400 or 408', async () => {
    const key = randomPrefix('after');
    const body = JSON.stringify({ resource: 'api:counted', key });
    const head = `POST /v1/check HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    for (const opening of [MALFORMED, head + body.slice(0, 5)]) {
      const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
      held.push(socket);
      let data = '';
      socket.setEncoding('utf8').on('data', (chunk: string) => (data += chunk));
      socket.on('error', () => undefined);
      socket.write(opening);
      await until(() => data.includes('\r\n\r\n'), 'the answer');
      // The rest of the stalled request, then a whole one: neither may reach a route.
      socket.write(body.slice(5) + head + body);
      await until(() => socket.readableEnded, 'the server to end the connection');
      expect(data.match(/HTTP\/1\.1/g)).toHaveLength(1);
    }
    const res = await fetch(new URL('/v1/check', serve.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    expect(await res.json()).toMatchObject({ allowed: true, remaining: 99 });
  });
});
