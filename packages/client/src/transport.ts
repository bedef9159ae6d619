import { ErrorCodes, SluiceError } from '@sluice/core';
import { decodeError } from '@sluice/core/wire';
import { Pool } from 'undici';
import type { ClientTlsOptions } from './options.js';

/** The header naming the service's active rule version. */
export const RULES_VERSION_HEADER = 'sluice-rules-version';
/** The header this client identifies itself with (the service counts clients for fair shares). */
export const CLIENT_ID_HEADER = 'sluice-client-id';
/** How often this client polls the service (its `rulesPollMs`): the service counts it as live until it misses a few. */
export const CLIENT_HEARTBEAT_HEADER = 'sluice-client-heartbeat-ms';

/** Largest answer body read from the service; anything larger is a protocol fault. */
export const MAX_ANSWER_BYTES = 16 * 1024 * 1024;

/** A JSON answer of the service. */
export interface Answer {
  readonly status: number;
  readonly body: unknown;
  /** The service's active rule version, from its answer header. */
  readonly rulesVersion?: number;
}

/** One call to the service. */
export interface CallOptions {
  readonly method?: 'GET' | 'POST';
  readonly body?: unknown;
  /** Longest wait for the answer, in ms. */
  readonly timeoutMs: number;
  /** Cancels the call (the service ends a wait when its client goes away). */
  readonly signal?: AbortSignal;
  /** The bearer token of this call instead of the transport's (outcome reports have their own). */
  readonly token?: string;
}

/** How the client reaches the service; a fake in unit tests. */
export interface Transport {
  /** Resolves to any answer with a status below 500; rejects with a {@link SluiceError} otherwise. */
  call(path: string, options: CallOptions): Promise<Answer>;
  close(): Promise<void>;
}

/** Codes that mean "the service is away" rather than "the call was wrong". */
const UNAVAILABLE_CODES: ReadonlySet<string> = new Set([
  ErrorCodes.STORE_TIMEOUT,
  ErrorCodes.STORE_UNAVAILABLE,
  ErrorCodes.STORE_PROTOCOL,
  ErrorCodes.CLOSED,
  'SLUICE_ERR_NOT_READY',
  'SLUICE_ERR_SHUTTING_DOWN',
  'SLUICE_ERR_INTERNAL',
]);

/** True when `err` means the service could not answer (so the store-failure policy applies). */
export function isUnavailable(err: unknown): boolean {
  return err instanceof SluiceError && UNAVAILABLE_CODES.has(err.code) && !(err instanceof ClosedByCaller);
}

/** The limiter itself was closed: never a reason to fall back. */
export class ClosedByCaller extends SluiceError {
  constructor() {
    super(ErrorCodes.CLOSED, 'the limiter was closed');
  }
}

/** Options of {@link HttpTransport}. */
export interface HttpTransportOptions {
  readonly url: string;
  readonly clientId: string;
  /** How often the client polls the service, in ms (sent as {@link CLIENT_HEARTBEAT_HEADER}). */
  readonly heartbeatMs?: number;
  /** The service's data-plane bearer token, if it requires one. */
  readonly token?: string | undefined;
  /** Most keep-alive connections to the service. */
  readonly connections: number;
  /** CA, client certificate and key for an `https://` service. */
  readonly tls?: ClientTlsOptions | undefined;
}

/** HTTP/1.1 keep-alive JSON calls to the service over an undici pool. */
export class HttpTransport implements Transport {
  readonly #pool: Pool;
  readonly #headers: Record<string, string>;

  constructor(options: HttpTransportOptions) {
    this.#pool = new Pool(options.url, {
      connections: options.connections,
      pipelining: 1,
      ...(options.tls === undefined ? {} : { connect: { ...options.tls } }),
    });
    this.#headers = {
      [CLIENT_ID_HEADER]: options.clientId,
      ...(options.heartbeatMs === undefined ? {} : { [CLIENT_HEARTBEAT_HEADER]: String(options.heartbeatMs) }),
      ...(options.token === undefined ? {} : { authorization: `Bearer ${options.token}` }),
    };
  }

  async call(path: string, options: CallOptions): Promise<Answer> {
    const { signal, timeoutMs } = options;
    let headers = this.#headers;
    if (options.token !== undefined) headers = { ...headers, authorization: `Bearer ${options.token}` };
    if (options.body !== undefined) headers = { ...headers, 'content-type': 'application/json' };
    let res;
    try {
      res = await this.#pool.request({
        path,
        method: options.method ?? (options.body === undefined ? 'GET' : 'POST'),
        headers,
        ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
        ...(signal === undefined ? {} : { signal }),
      });
    } catch (err) {
      throw transportError(err, signal);
    }
    let text: string;
    try {
      text = await res.body.text();
    } catch (err) {
      throw transportError(err, signal);
    }
    const version = Number(res.headers[RULES_VERSION_HEADER]);
    const rulesVersion = Number.isSafeInteger(version) && version > 0 ? { rulesVersion: version } : {};
    if (text.length > MAX_ANSWER_BYTES) throw new SluiceError(ErrorCodes.STORE_PROTOCOL, 'the service answer is too large');
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch (err) {
      if (res.statusCode >= 500) throw new SluiceError(ErrorCodes.STORE_UNAVAILABLE, `the service answered ${res.statusCode}`);
      throw new SluiceError(ErrorCodes.STORE_PROTOCOL, 'the service answered something other than JSON', { cause: err });
    }
    if (res.statusCode >= 500) throw decodeError(body, res.statusCode);
    return { status: res.statusCode, body, ...rulesVersion };
  }

  async close(): Promise<void> {
    await this.#pool.close();
  }
}

function transportError(err: unknown, signal: AbortSignal | undefined): SluiceError {
  if (signal?.aborted) return new SluiceError(ErrorCodes.ABORTED, 'the wait was aborted', { cause: signal.reason });
  const code = (err as { code?: unknown } | null)?.code;
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT') {
    return new SluiceError(ErrorCodes.STORE_TIMEOUT, 'the service did not answer in time', { cause: err });
  }
  return new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'the service is unreachable', { cause: err });
}
