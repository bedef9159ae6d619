/**
 * Fleet-wide circuit breakers across real processes: three worker processes call one fake
 * downstream through a breaker kept in Redis (docs/control-plane.md, "Fleet-wide circuit
 * breakers"). When the downstream starts failing, every worker's breaker opens; while it is
 * half-open the whole fleet sends at most `halfOpenProbes` probes (counted at the downstream);
 * when the probes succeed it closes on every worker.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it, vi } from 'vitest';
import { randomPrefix, redisUrl } from '../env.js';

const worker = fileURLToPath(new URL('./fixtures/breaker-worker.mjs', import.meta.url));
const WORKERS = 3;
const PROBES = 2;

type Mode = 'ok' | 'fail' | 'hold';
let mode: Mode = 'ok';
let received = 0;
let lastReceivedAt = 0;
const held: ServerResponse[] = [];
const downstream = createServer((req: IncomingMessage, res: ServerResponse) => {
  received++;
  lastReceivedAt = Date.now();
  req.resume();
  if (mode === 'hold') held.push(res);
  else res.writeHead(mode === 'ok' ? 200 : 503).end();
});
const children: ChildProcess[] = [];
afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill();
  for (const r of held) r.end();
  await new Promise((r) => downstream.close(r));
});

it('a failing downstream opens the breaker on every worker process, then recovers through limited probes', async () => {
  await new Promise<void>((r) => downstream.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(downstream.address() as AddressInfo).port}/`;
  const prefix = randomPrefix('fleet-breaker');
  const states = new Map<number, string>();
  const exits: Promise<number | null>[] = [];
  for (let i = 0; i < WORKERS; i++) {
    const child = spawn(process.execPath, [worker, redisUrl(), prefix, url], { stdio: ['pipe', 'pipe', 'inherit'] });
    children.push(child);
    exits.push(new Promise((r) => child.once('exit', r)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const { state } = JSON.parse(line) as { state: string };
      states.set(i, state);
    });
  }
  const all = (state: string) => {
    expect(children.map((c) => c.exitCode)).toEqual(Array(WORKERS).fill(null)); // none died
    expect(states.size).toBe(WORKERS);
    expect([...states.values()]).toEqual(Array(WORKERS).fill(state));
  };
  const slow = { timeout: 30_000, interval: 50 };

  // Healthy: calls flow, the breaker stays closed everywhere.
  await vi.waitFor(() => {
    all('closed');
    expect(received).toBeGreaterThan(30);
  }, slow);

  // The downstream fails: the fleet's failures open the breaker on every worker.
  mode = 'fail';
  await vi.waitFor(() => all('open'), slow);

  // Recovered, but answering only when released: probes are admitted, their outcomes held back.
  // Once the open duration ends the fleet gets PROBES permits in all, and no more until they
  // report (or an open duration passes, when unanswered probes are written off).
  // Calls a worker admitted before it heard of the open state may still be on their way: switch
  // once the downstream has been quiet for a while (the breaker stays open for 6 s).
  await vi.waitFor(() => expect(Date.now() - lastReceivedAt).toBeGreaterThan(500), slow);
  mode = 'hold';
  received = 0;
  await vi.waitFor(() => expect(held.length).toBe(PROBES), slow);
  // Give every worker several sync periods to ask for more; none may get one.
  await new Promise((r) => setTimeout(r, 1000));
  expect(received).toBe(PROBES);
  expect([...states.values()].every((s) => s === 'half_open' || s === 'open')).toBe(true);

  // The probes succeed: closed on every worker, and calls flow again.
  mode = 'ok';
  for (const r of held.splice(0)) r.writeHead(200).end();
  await vi.waitFor(() => {
    all('closed');
    expect(received).toBeGreaterThan(PROBES + 30);
  }, slow);

  for (const c of children) c.stdin!.end('stop\n');
  expect(await Promise.all(exits)).toEqual(Array(WORKERS).fill(0));
}, 90_000);
