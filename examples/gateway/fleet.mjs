// A small governance fleet: 3 gateways (node:http behind @sluice/gateway), 2 aggregators, one
// event stream, and a load generator that bursts on /search for 6 s, shows it blocked on every
// gateway for as long as the burst lasts, then slows down and shows the block lifted.
//
//   npm run build
//   node examples/gateway/fleet.mjs                          # everything in this process, in-process stream
//   node examples/gateway/fleet.mjs --redis redis://127.0.0.1:6379   # one process each, Redis Streams
import { fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { URL, fileURLToPath } from 'node:url';
import { Gateway } from '@sluice/gateway';
import { compileRules } from '@sluice/rules';
import { Aggregator, MemoryOwnershipStore, RedisOwnershipStore } from '@sluice/governance';
import { MemoryTransport } from '@sluice/stream';
import { RedisStreamsTransport } from '@sluice/stream/redis';

const PARTITIONS = 4;
const here = fileURLToPath(new URL('.', import.meta.url));
const governance = compileRules(readFileSync(`${here}rules.yaml`, 'utf8'), { file: 'rules.yaml' }).governance;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A gateway: the application answers 401 on /login without the password, 200 elsewhere. */
async function startGateway(transport) {
  const gateway = new Gateway({ transport, dimensions: { user: { header: 'x-user' } } });
  await gateway.start();
  const server = createServer(
    gateway.wrap((req, res) => {
      const denied = req.url.startsWith('/login') && req.headers['x-password'] !== 'secret';
      res.writeHead(denied ? 401 : 200).end(denied ? 'wrong password\n' : 'ok\n');
    }),
  );
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: server.address().port,
    close: async () => {
      server.closeAllConnections();
      server.close();
      await gateway.close();
    },
  };
}

// --- child processes of the Redis Streams mode ---------------------------------------------
const [role, url, prefix] = process.argv.slice(2);
if (role === 'gateway-process' || role === 'aggregator-process') {
  const transport = new RedisStreamsTransport({ partitions: PARTITIONS, url, prefix });
  let close;
  if (role === 'gateway-process') {
    const g = await startGateway(transport);
    process.send({ port: g.port });
    close = g.close;
  } else {
    const ownership = new RedisOwnershipStore({ url, prefix: `${prefix}:agg:` });
    const aggregator = new Aggregator({ transport, rules: governance, ownership });
    await aggregator.start();
    process.send({ id: aggregator.id });
    close = async () => {
      await aggregator.close();
      await ownership.close();
    };
  }
  process.on('disconnect', () => {
    close()
      .then(() => transport.close())
      .finally(() => process.exit(0));
  });
} else {
  await main();
}

async function main() {
  const redis = process.argv.indexOf('--redis');
  const redisUrl = redis >= 0 ? process.argv[redis + 1] : undefined;
  const closers = [];
  let ports;
  if (redisUrl === undefined) {
    console.log('in-process stream: 3 gateways and 2 aggregators in this process');
    const transport = new MemoryTransport({ partitions: PARTITIONS });
    // Aggregators of one process share one ownership store, so each partition has one owner.
    const ownership = new MemoryOwnershipStore();
    for (const id of ['aggregator-1', 'aggregator-2']) {
      const a = new Aggregator({ transport, rules: governance, ownership, id });
      await a.start();
      closers.push(() => a.close());
    }
    const gateways = await Promise.all([1, 2, 3].map(() => startGateway(transport)));
    closers.unshift(...gateways.map((g) => g.close));
    closers.push(() => transport.close());
    ports = gateways.map((g) => g.port);
  } else {
    // A fresh prefix per run: a run does not inherit the previous run's windows and blocks.
    const prefix = `sluice-example-${Date.now().toString(36)}`;
    console.log(`Redis Streams at ${redisUrl} (keys ${prefix}*): 3 gateway processes and 2 aggregator processes`);
    const start = (r) =>
      new Promise((resolve) => {
        const child = fork(fileURLToPath(import.meta.url), [r, redisUrl, prefix]);
        child.once('message', (m) => resolve({ child, m }));
      });
    const aggregators = await Promise.all([start('aggregator-process'), start('aggregator-process')]);
    const gateways = await Promise.all([1, 2, 3].map(() => start('gateway-process')));
    ports = gateways.map((g) => g.m.port);
    for (const c of [...gateways, ...aggregators]) closers.push(() => new Promise((r) => c.child.once('exit', r).disconnect()));
  }
  console.log(`gateways on ports ${ports.join(', ')}\n`);

  const request = async (port, path, headers = {}) =>
    (await globalThis.fetch(`http://127.0.0.1:${port}${path}`, { headers })).status;
  /** Sends `rate` requests per second to `path` for `ms`, spread over the gateways; counts answers. */
  const load = async (path, rate, ms, headers) => {
    const counts = {};
    const end = Date.now() + ms;
    let i = 0;
    while (Date.now() < end) {
      const tick = Date.now();
      const batch = Math.max(1, Math.round(rate / 20));
      const answers = await Promise.all(Array.from({ length: batch }, () => request(ports[i++ % ports.length], path, headers)));
      for (const s of answers) counts[s] = (counts[s] ?? 0) + 1;
      await sleep(Math.max(0, 50 - (Date.now() - tick)));
    }
    return counts;
  };
  const show = (label, counts) => console.log(`${label.padEnd(44)} ${JSON.stringify(counts)}`);

  // The burst lasts 3x the block time (blockMs: 2000): the requests the gateways reject are
  // counted as offered load, so the block holds until the burst ends.
  for (let s = 0; s < 6; s++) show(`burst: 400 req/s on /search, second ${s + 1}`, await load('/search', 400, 1000));
  show('meanwhile /orders on every gateway', await load('/orders', 20, 300));
  for (let s = 0; s < 5; s++) show(`calm: 20 req/s on /search, second ${s + 1}`, await load('/search', 20, 1000));

  console.log('');
  for (let i = 0; i < 11; i++) await request(ports[i % ports.length], '/login', { 'x-user': 'mallory' });
  show('mallory failed to log in 11 times', {});
  await sleep(500);
  show('mallory on /orders, every gateway', await load('/orders', 20, 500, { 'x-user': 'mallory' }));
  show('alice on /orders, every gateway', await load('/orders', 20, 500, { 'x-user': 'alice' }));

  for (const close of closers) await close();
}
