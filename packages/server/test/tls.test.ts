/**
 * `sluice serve` over TLS, with certificates made by openssl for the test: HTTPS and gRPC over
 * TLS answer clients that trust the CA and refuse those that trust another, nothing is answered
 * in clear (so tokens never travel in clear), mutual TLS refuses a client without a certificate,
 * SIGHUP picks up a rotated certificate, and the remote client speaks https with a CA and a
 * client certificate.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { RemoteLimiter } from '@sluice/client';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadRlsDefinition } from './proto.js';
import { eventually, runCli, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

const tmp = scratch();
const servers: ServerProcess[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  tmp.remove();
});
const path = (name: string) => join(tmp.dir, name);
const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });

/** A CA `name` (name.key, name.crt). */
function makeCa(name: string): void {
  openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2',
    '-subj', `/CN=${name}`, '-keyout', path(`${name}.key`), '-out', path(`${name}.crt`)); // prettier-ignore
}
/** A certificate `name` signed by `ca`, for 127.0.0.1 and localhost (name.key, name.crt). */
function makeCert(name: string, ca: string, usage: 'serverAuth' | 'clientAuth'): void {
  writeFileSync(path(`${name}.ext`), `subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=${usage}\n`);
  openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', `/CN=${name}`,
    '-keyout', path(`${name}.key`), '-out', path(`${name}.csr`)); // prettier-ignore
  openssl('x509', '-req', '-in', path(`${name}.csr`), '-CA', path(`${ca}.crt`), '-CAkey', path(`${ca}.key`),
    '-CAcreateserial', '-days', '2', '-extfile', path(`${name}.ext`), '-out', path(`${name}.crt`)); // prettier-ignore
}
const pem = (name: string) => readFileSync(path(name));

const RULES = `resources:
  api:tls:
    limits: { algorithm: fixed-window, limit: 100, windowMs: 60000 }
domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: { unit: second, requests_per_unit: 5 }
`;
const TOKEN_HEADER = 'Bearer api-token-0123456789abcdef';

/** POST /v1/check over HTTPS trusting `ca` (and presenting `client`, if given). */
async function check(url: string, ca: string, client?: string): Promise<number> {
  const dispatcher = new Agent({
    connect: { ca: pem(`${ca}.crt`), ...(client === undefined ? {} : { cert: pem(`${client}.crt`), key: pem(`${client}.key`) }) },
  });
  try {
    const res = await undiciFetch(`${url}/v1/check`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: TOKEN_HEADER },
      body: JSON.stringify({ resource: 'api:tls', key: 'k' }),
      dispatcher,
    });
    await res.text();
    return res.status;
  } finally {
    await dispatcher.close();
  }
}

/** One ShouldRateLimit call over TLS trusting `ca`; resolves to its overall code or the error. */
function shouldRateLimit(port: number, credentials: grpc.ChannelCredentials): Promise<string> {
  const method = loadRlsDefinition().ShouldRateLimit!;
  const client = new grpc.Client(`127.0.0.1:${port}`, credentials);
  const metadata = new grpc.Metadata();
  metadata.set('authorization', TOKEN_HEADER);
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      { domain: 'd', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] },
      metadata,
      { deadline: Date.now() + 10_000 },
      (err: grpc.ServiceError | null, res?: { overall_code?: string }) => {
        client.close();
        resolve(err ? `error ${err.code}` : String(res?.overall_code));
      },
    );
  });
}

beforeAll(() => {
  makeCa('ca');
  makeCa('other-ca');
  makeCert('server', 'ca', 'serverAuth');
  makeCert('server2', 'other-ca', 'serverAuth');
  makeCert('client', 'ca', 'clientAuth');
  writeRules(tmp.dir, RULES);
});

const tlsFlags = (extra: string[] = []) => [
  '--rules', path('rules.yaml'), '--rules-dir', path(`versions-${Math.random()}`),
  '--api-token', 'api-token-0123456789abcdef',
  '--tls-cert', path('server.crt'), '--tls-key', path('server.key'), ...extra,
]; // prettier-ignore

describe('TLS', () => {
  it('serves HTTPS and gRPC over TLS to clients trusting its CA, and nothing in clear', async () => {
    const s = await spawnServer(tlsFlags());
    servers.push(s);
    expect(s.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(await check(s.url, 'ca')).toBe(200);
    await expect(check(s.url, 'other-ca')).rejects.toThrow();
    // The same port in clear: no answer, so a token sent that way is never read.
    await expect(
      fetch(s.url.replace('https:', 'http:') + '/v1/check', { method: 'POST', headers: { authorization: TOKEN_HEADER } }),
    ).rejects.toThrow();

    expect(await shouldRateLimit(s.grpcPort, grpc.credentials.createSsl(pem('ca.crt')))).toBe('OK');
    expect(await shouldRateLimit(s.grpcPort, grpc.credentials.createSsl(pem('other-ca.crt')))).toBe(
      `error ${grpc.status.UNAVAILABLE}`,
    );
    expect(await shouldRateLimit(s.grpcPort, grpc.credentials.createInsecure())).toBe(`error ${grpc.status.UNAVAILABLE}`);
  });

  it('with a client CA, refuses clients without a certificate on both listeners', async () => {
    const s = await spawnServer(tlsFlags(['--tls-client-ca', path('ca.crt')]));
    servers.push(s);
    await expect(check(s.url, 'ca')).rejects.toThrow();
    expect(await check(s.url, 'ca', 'client')).toBe(200);
    expect(await shouldRateLimit(s.grpcPort, grpc.credentials.createSsl(pem('ca.crt')))).toMatch(/^error /);
    const mutual = grpc.credentials.createSsl(pem('ca.crt'), pem('client.key'), pem('client.crt'));
    expect(await shouldRateLimit(s.grpcPort, mutual)).toBe('OK');
  });

  it('picks up a rotated certificate on SIGHUP, and keeps the old one when the new files are bad', async () => {
    writeFileSync(path('live.crt'), pem('server.crt'));
    writeFileSync(path('live.key'), pem('server.key'));
    const s = await spawnServer([
      '--rules', path('rules.yaml'), '--rules-dir', path('versions-rotate'), '--api-token', 'api-token-0123456789abcdef',
      '--tls-cert', path('live.crt'), '--tls-key', path('live.key'),
    ]); // prettier-ignore
    servers.push(s);
    expect(await check(s.url, 'ca')).toBe(200);
    // A half-written rotation (the key of another certificate) is refused; the old one stays.
    writeFileSync(path('live.crt'), pem('server2.crt'));
    s.child.kill('SIGHUP');
    await eventually(async () => s.logs.some((l) => l.includes('TLS files not read again')));
    expect(await check(s.url, 'ca')).toBe(200);
    writeFileSync(path('live.key'), pem('server2.key'));
    s.child.kill('SIGHUP');
    await eventually(async () => s.logs.some((l) => l.includes('TLS certificate and key read again')));
    expect(await check(s.url, 'other-ca')).toBe(200);
    await expect(check(s.url, 'ca')).rejects.toThrow();
    expect(s.child.exitCode).toBeNull();
  });

  it('refuses to start on unreadable or mismatched files, naming them', async () => {
    const missing = await runCli([
      'serve',
      '--rules',
      path('rules.yaml'),
      '--tls-cert',
      path('nope.crt'),
      '--tls-key',
      path('server.key'),
    ]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`--tls-cert ${path('nope.crt')}: cannot be read (ENOENT)`);
    const mismatched = await runCli([
      'serve',
      '--rules',
      path('rules.yaml'),
      '--tls-cert',
      path('server.crt'),
      '--tls-key',
      path('server2.key'),
    ]);
    expect(mismatched.code).toBe(2);
    expect(mismatched.stderr).toContain('TLS files');
    const half = await runCli(['serve', '--rules', path('rules.yaml'), '--tls-cert', path('server.crt')]);
    expect(half.code).toBe(2);
    expect(half.stderr).toContain('go together');
  });

  it('is spoken by the remote client with a CA and a client certificate', async () => {
    const s = await spawnServer(tlsFlags(['--tls-client-ca', path('ca.crt')]));
    servers.push(s);
    const limiter = new RemoteLimiter({
      url: s.url,
      token: 'api-token-0123456789abcdef',
      tls: { ca: pem('ca.crt'), cert: pem('client.crt'), key: pem('client.key') },
      logger: false,
    });
    try {
      const d = await limiter.try('api:tls', { key: 'remote' });
      expect(d).toMatchObject({ allowed: true, source: 'store' });
    } finally {
      await limiter.close();
    }
    expect(() => new RemoteLimiter({ url: s.url.replace('https:', 'http:'), tls: { ca: pem('ca.crt') } })).toThrow(
      /needs an https:\/\/ url/,
    );
  });
});
