/**
 * A flood of distinct keys against `sluice serve` on its embedded in-memory store: new-key
 * throughput and the latency of checks on one existing (hot) key while the table fills and past
 * it. Run after `npm run build`:
 *
 *   node bench/dist/memory/key-flood.js [--keys 1200000] [--batch 500] [--in-flight 4] [--step 100000] [-- SERVE ARGS]
 *
 * Starts `sluice serve` (the workspace's CLI) on free loopback ports with a rule file of its own
 * (one resource, a token bucket of 100 a day per key: a key that took one permit stays live for 864 s) and
 * `--max-batch` large enough for the batches; arguments after `--` go to `sluice serve` as they
 * are (e.g. `-- --max-keys 1000000`). `--in-flight` loops each post batches of `--batch` new keys
 * to `POST /v1/check` until `--keys` keys were sent, while one loop checks the hot key (a call,
 * then 20 ms of pause). Every `--step` keys a row: new keys per second over the step, how many
 * of them were allowed, and the hot key's check latency (p50, max) and remaining count over it.
 * The server is stopped at the end, on failure and on Ctrl-C.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const SLUICE_BIN = join(resolve(dirname(fileURLToPath(import.meta.url)), '../../..'), 'packages/server/bin/sluice.js');
const RESOURCE = 'flood';

interface Args {
  keys: number;
  batch: number;
  inFlight: number;
  step: number;
  serveArgs: string[];
}

function parseArgs(argv: readonly string[]): Args {
  const a: Args = { keys: 1_200_000, batch: 500, inFlight: 4, step: 100_000, serveArgs: [] };
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i]!;
    if (v === '--') {
      a.serveArgs = argv.slice(i + 1);
      break;
    }
    const n = Number(argv[++i]);
    if (v === '--keys') a.keys = n;
    else if (v === '--batch') a.batch = n;
    else if (v === '--in-flight') a.inFlight = n;
    else if (v === '--step') a.step = n;
    else
      throw new Error(
        'usage: node bench/dist/memory/key-flood.js [--keys n] [--batch n] [--in-flight n] [--step n] [-- SERVE ARGS]',
      );
  }
  return a;
}

/** Starts `sluice serve` and resolves with its URL once it logs that it serves. */
function startServe(dir: string, extra: readonly string[]): Promise<{ child: ChildProcess; url: string }> {
  const rules = join(dir, 'rules.json');
  writeFileSync(
    rules,
    JSON.stringify({ resources: { [RESOURCE]: { limits: { algorithm: 'token-bucket', limit: 100, windowMs: 86_400_000 } } } }),
  );
  const args = ['serve', '--rules', rules, '--host', '127.0.0.1', '--port', '0', '--grpc-port', '0', '--max-batch', '10000'];
  const child = spawn(process.execPath, [SLUICE_BIN, ...args, ...extra], {
    env: { ...process.env, SLUICE_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolveStart, reject) => {
    let buffered = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const m = /"url":"([^"]+)"/.exec(buffered);
      if (m !== null) resolveStart({ child, url: m[1]! });
    });
    child.once('exit', (code) => reject(new Error(`sluice serve exited with ${code}`)));
  });
}

async function post(url: string, body: unknown): Promise<unknown> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return res.json();
}

interface Probe {
  ms: number;
  remaining: number;
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

async function run(a: Args): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-flood-'));
  // The server runs with a log level of warn: its `sluice serving` line is info, so ask for it.
  const { child, url } = await startServe(dir, ['--log-level', 'info', ...a.serveArgs]);
  const stop = () => {
    if (child.exitCode === null) child.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('SIGINT', () => {
    stop();
    process.exit(130);
  });
  try {
    const check = `${url}/v1/check`;
    // The hot key holds its state from before the flood: one permit taken.
    await post(check, { resource: RESOURCE, key: 'hot' });
    let sent = 0;
    let allowed = 0;
    let done = false;
    let probes: Probe[] = [];
    const prober = (async () => {
      while (!done) {
        const started = performance.now();
        const d = (await post(check, { resource: RESOURCE, key: 'hot', cost: 0 })) as { remaining: number };
        probes.push({ ms: performance.now() - started, remaining: d.remaining });
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    console.log(
      `flood of ${a.keys.toLocaleString('en-US')} keys, batches of ${a.batch}, ${a.inFlight} in flight: ${a.serveArgs.join(' ')}`,
    );
    console.log('keys sent | new keys/s | allowed | hot key check p50 ms | max ms | hot remaining');
    let stepStart = performance.now();
    let stepAllowed = 0;
    let nextRow = a.step;
    const row = () => {
      const seconds = (performance.now() - stepStart) / 1000;
      const lat = probes.map((p) => p.ms).sort((x, y) => x - y);
      const remaining = [...new Set(probes.map((p) => p.remaining))].join(',');
      console.log(
        [
          sent.toLocaleString('en-US'),
          Math.round(a.step / seconds).toLocaleString('en-US'),
          stepAllowed.toLocaleString('en-US'),
          percentile(lat, 0.5).toFixed(1),
          percentile(lat, 1).toFixed(1),
          remaining,
        ].join(' | '),
      );
      stepStart = performance.now();
      stepAllowed = 0;
      probes = [];
    };
    const flooders = Array.from({ length: a.inFlight }, async () => {
      while (sent < a.keys) {
        const from = sent;
        sent += a.batch;
        const items = Array.from({ length: a.batch }, (_, i) => ({ resource: RESOURCE, key: `k${from + i}` }));
        const { results } = (await post(check, { items })) as { results: { allowed?: boolean }[] };
        const n = results.filter((r) => r.allowed === true).length;
        allowed += n;
        stepAllowed += n;
        while (sent >= nextRow) {
          row();
          nextRow += a.step;
        }
      }
    });
    await Promise.all(flooders);
    done = true;
    await prober;
    console.log(`allowed ${allowed.toLocaleString('en-US')} of ${sent.toLocaleString('en-US')} new keys`);
  } finally {
    stop();
  }
}

run(parseArgs(process.argv.slice(2))).catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
