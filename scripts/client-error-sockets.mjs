/**
 * What requests answered on the HTTP listener's client-error path leave behind, figures only
 * (no pass/fail): a real `sluice serve` (the built CLI, embedded store, the example rules) gets
 * 1,000 malformed requests from one address, then 1,000 from each of ten; after each flood the
 * process's open descriptors are counted and the flooding address (then a fresh one) asks for
 * `/healthz`. Linux only (it reads /proc). Run after `npm run build`:
 * `node scripts/client-error-sockets.mjs`.
 */
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { connect } from 'node:net';
import { URL, fileURLToPath } from 'node:url';

const bin = fileURLToPath(new URL('../packages/server/bin/sluice.js', import.meta.url));
const rules = fileURLToPath(new URL('../packages/server/examples/rules.yaml', import.meta.url));
const child = spawn(
  process.execPath,
  [bin, 'serve', '--rules', rules, '--port', '0', '--grpc-port', '0', '--log-level', 'info'],
  {
    stdio: ['ignore', 'pipe', 'inherit'],
  },
);
const port = await new Promise((resolve, reject) => {
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk) => {
    out += chunk;
    const m = /"url":"http:\/\/[^:]+:(\d+)"/.exec(out);
    if (m !== null) resolve(Number(m[1]));
  });
  child.once('exit', () => reject(new Error('sluice serve exited')));
});
child.stdout.resume();

const fds = () => readdirSync(`/proc/${child.pid}/fd`).length;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Sends `payload` from `localAddress` and resolves to the first line of the answer ('' if none). */
function exchange(localAddress, payload) {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress });
    let data = '';
    socket.setEncoding('utf8').on('data', (c) => (data += c));
    socket.on('error', () => undefined);
    socket.on('close', () => resolve(data.split('\r\n')[0]));
    socket.write(payload);
  });
}
const malformed = (address) => exchange(address, 'GET / HTTP/1.1\r\nBad Header: y\r\n\r\n');
const health = (address) => exchange(address, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');

/** `count` malformed requests, 50 at a time, spread over `addresses`; how many were answered 400. */
async function flood(count, addresses) {
  let answered = 0;
  for (let sent = 0; sent < count; sent += 50) {
    const lines = await Promise.all(Array.from({ length: 50 }, (_, i) => malformed(addresses[(sent + i) % addresses.length])));
    answered += lines.filter((l) => l.startsWith('HTTP/1.1 400')).length;
  }
  return answered;
}

try {
  console.log(`open descriptors at rest: ${fds()}`);
  const one = await flood(1000, ['127.0.0.9']);
  await sleep(2000);
  console.log(`1,000 malformed from one address: ${one} answered 400; 2 s later ${fds()} descriptors`);
  console.log(`  that address asks /healthz: ${JSON.stringify(await health('127.0.0.9'))}`);
  const ten = Array.from({ length: 10 }, (_, i) => `127.0.3.${i + 1}`);
  const many = await flood(10_000, ten);
  await sleep(2000);
  console.log(`1,000 malformed from each of ten addresses: ${many} answered 400; 2 s later ${fds()} descriptors`);
  console.log(`  a fresh address asks /healthz: ${JSON.stringify(await health('127.0.4.1'))}`);
} finally {
  child.kill();
}
