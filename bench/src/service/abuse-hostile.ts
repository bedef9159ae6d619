/**
 * The hostile clients of the bench's abuse part, run as a process of their own
 * (`abuse-hostile.js URL GRPC_TARGET ATTACKS`) until the parent sends `stop`: batches of new keys
 * from {@link HOSTILE_ADDRESS} and, when ATTACKS is `all`, stalled bodies, garbage requests and a
 * new Envoy limit override per gRPC call at the same time.
 */
import { connect as h2connect } from 'node:http2';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { PROTO_DIR, loadRlsMethod } from './service-load.js';
import { SERVICE_RULES } from './service-server.js';

/** Connections of the batch flood, each a closed loop. */
export const FLOOD_IN_FLIGHT = 8;
/** Keys in each of its batches (the server's default `--max-batch`). */
export const FLOOD_BATCH = 100;
/** The hostile clients' address: the service shares its work by address. */
export const HOSTILE_ADDRESS = '127.0.0.2';
/** Most connections held with a stalled body. */
export const STALLED = 200;

/** What the hostile clients send: the batch flood alone, or every attack at once. */
export type Attacks = 'flood' | 'all';

/** The hostile clients, until `stop` is set; resolves once they have all ended. */
function hostile(url: string, grpcTarget: string, attacks: Attacks, stop: { done: boolean }): Promise<unknown> {
  const { port } = new URL(url);
  const flood = new Pool(url, { connections: FLOOD_IN_FLIGHT, localAddress: HOSTILE_ADDRESS });
  let i = 0;
  const floods = Array.from({ length: FLOOD_IN_FLIGHT }, async () => {
    while (!stop.done) {
      const items = Array.from({ length: FLOOD_BATCH }, () => ({ resource: SERVICE_RULES.resource, key: `flood-${i++}` }));
      await flood
        .request({
          path: '/v1/check',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ items }),
        })
        .then((r) => r.body.text())
        .catch(() => undefined);
    }
  });
  const sockets: Socket[] = [];
  const junk = (async () => {
    while (!stop.done && attacks === 'all') {
      if (sockets.length < STALLED) {
        const s = connect({ port: Number(port), host: '127.0.0.1', localAddress: HOSTILE_ADDRESS }, () =>
          s.write('POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{'),
        );
        s.on('error', () => undefined);
        sockets.push(s);
      }
      const g = connect({ port: Number(port), host: '127.0.0.1', localAddress: HOSTILE_ADDRESS }, () =>
        g.end('GARBAGE / HTTP/9.9\r\n\r\n'),
      );
      g.on('error', () => undefined);
      await sleep(10);
    }
  })();
  const overrides = attacks === 'all' ? grpcOverrides(grpcTarget, stop) : Promise.resolve();
  return Promise.all([...floods, junk, overrides]).finally(async () => {
    for (const s of sockets) s.destroy();
    await flood.close();
  });
}

/** A new Envoy limit override on every gRPC call, one call at a time, until `stop` is set. */
async function grpcOverrides(grpcTarget: string, stop: { done: boolean }): Promise<void> {
  const method = loadRlsMethod(PROTO_DIR);
  // gRPC by hand over node:http2, so that its connection too comes from the hostile address.
  const target = new URL(`http://${grpcTarget}`);
  const session = h2connect(target, {
    createConnection: () => connect({ host: target.hostname, port: Number(target.port), localAddress: HOSTILE_ADDRESS }),
  });
  session.on('error', () => undefined);
  let o = 0;
  try {
    while (!stop.done && !session.destroyed) {
      const n = o++;
      const message = method.requestSerialize({
        domain: SERVICE_RULES.domain,
        descriptors: [
          { entries: [{ key: SERVICE_RULES.descriptorKey, value: `u${n}` }], limit: { requests_per_unit: 1 + n, unit: 'HOUR' } },
        ],
      });
      const frame = Buffer.alloc(5 + message.length);
      frame.writeUInt32BE(message.length, 1);
      message.copy(frame, 5);
      await new Promise<void>((resolve) => {
        const call = session.request({
          ':method': 'POST',
          ':path': method.path,
          'content-type': 'application/grpc',
          te: 'trailers',
        });
        call.on('error', () => resolve());
        call.on('close', () => resolve());
        call.resume();
        call.end(frame);
      });
    }
  } finally {
    session.close();
  }
}

// Run as a child: hostile until told to stop, then exit.
const [url, grpcTarget, attacks] = process.argv.slice(2);
if (url !== undefined && grpcTarget !== undefined && (attacks === 'flood' || attacks === 'all') && process.send !== undefined) {
  const stop = { done: false };
  const running = hostile(url, grpcTarget, attacks, stop);
  process.on('message', (m) => {
    if (m === 'stop') stop.done = true;
  });
  void running.finally(() => process.exit(0));
}
