import { readFileSync } from 'node:fs';
import { createSecureContext, type SecureContextOptions } from 'node:tls';
import { SettingsError, type Settings } from './settings.js';

/** What both listeners serve TLS with: the key pair and, for mutual TLS, the clients' CA. */
export interface TlsMaterial extends SecureContextOptions {
  readonly cert: Buffer;
  readonly key: Buffer;
  readonly ca?: Buffer;
  /** Ask every client for a certificate, and refuse one that does not chain to `ca`. */
  readonly requestCert: boolean;
  readonly rejectUnauthorized: boolean;
}

function read(path: string, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new SettingsError(`${what} ${path}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
}

/**
 * Reads the TLS files the settings name (at start, and again on SIGHUP when certificates
 * rotate), or undefined when TLS is off. Each file is checked as OpenSSL will use it (the PEM
 * parses, the key matches the certificate): a bad file is a {@link SettingsError} naming it, not
 * a failure at the first handshake.
 */
export function readTls(settings: Pick<Settings, 'tlsCert' | 'tlsKey' | 'tlsClientCa'>): TlsMaterial | undefined {
  if (settings.tlsCert === undefined || settings.tlsKey === undefined) return undefined;
  const cert = read(settings.tlsCert, '--tls-cert');
  const key = read(settings.tlsKey, '--tls-key');
  const ca = settings.tlsClientCa === undefined ? undefined : read(settings.tlsClientCa, '--tls-client-ca');
  try {
    createSecureContext({ cert, key, ...(ca === undefined ? {} : { ca }) });
  } catch (err) {
    const files = [settings.tlsCert, settings.tlsKey, settings.tlsClientCa].filter((f) => f !== undefined).join(', ');
    throw new SettingsError(`TLS files ${files}: ${err instanceof Error ? err.message : String(err)}`);
  }
  const mutual = ca !== undefined;
  return { cert, key, ...(mutual ? { ca } : {}), requestCert: mutual, rejectUnauthorized: mutual };
}
