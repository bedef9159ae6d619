import type { ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { ServerErrorCodes } from '../errors.js';
import type { ConnectionCut } from '../clients/connections.js';

/** The answers in progress on each connection (pipelined requests are answered in order). */
const pending = new WeakMap<Duplex, Set<ServerResponse>>();
/** Connections whose request failed to parse: answered once, then closed. */
const failed = new WeakSet<Duplex>();

/**
 * Notes an answer in progress on its connection until it is written or the connection closes.
 * Called from the server's `request` event, which Node emits in order as it parses each request.
 */
export function trackResponse(res: ServerResponse): void {
  // A pipelined answer gets its socket only when the answers before it are written.
  const socket = res.req.socket;
  let answers = pending.get(socket);
  if (answers === undefined) {
    answers = new Set();
    pending.set(socket, answers);
  }
  const set = answers;
  set.add(res);
  const done = () => set.delete(res);
  res.once('finish', done);
  res.once('close', done);
}

/**
 * Runs `fn` once the answers to every request received whole on `socket` are written (at once
 * if there are none). A request still being received when its connection failed is not waited for.
 */
function afterAnswers(socket: Duplex, fn: () => void): void {
  const waitFor = [...(pending.get(socket) ?? [])].filter((res) => res.req.complete);
  let left = waitFor.length;
  if (left === 0) {
    fn();
    return;
  }
  const done = () => {
    if (--left === 0) fn();
  };
  for (const res of waitFor) {
    let once = false;
    const settle = () => {
      if (once) return;
      once = true;
      done();
    };
    res.once('finish', settle);
    res.once('close', settle);
  }
}

/** The raw answer to a request Node's HTTP parser refused (or did not finish receiving in time). */
function rawAnswer(code: string | undefined): { status: string; body: string; cut: ConnectionCut } {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return {
      status: '408 Request Timeout',
      body: JSON.stringify({
        error: { code: ServerErrorCodes.REQUEST_TIMEOUT, message: 'the request was not received in time' },
      }),
      cut: 'request_timeout',
    };
  }
  const tooLarge = code === 'HPE_HEADER_OVERFLOW';
  return {
    status: tooLarge ? '431 Request Header Fields Too Large' : '400 Bad Request',
    body: JSON.stringify({
      error: tooLarge
        ? { code: ServerErrorCodes.BODY_TOO_LARGE, message: 'the request head is too large' }
        : { code: ServerErrorCodes.INVALID_REQUEST, message: 'malformed HTTP request' },
    }),
    cut: 'malformed_request',
  };
}

/**
 * Answers a request that never reached a route (malformed, or not received within the request
 * timeout) and closes its connection. HTTP/1.1 answers pipelined requests in order and, after a
 * request it cannot parse, cannot find where the next one starts: so the answers to the requests
 * before it are written first, then this one, then the connection is closed.
 */
export function answerClientError(err: Error, socket: Duplex, cut: (reason: ConnectionCut) => void): void {
  if (failed.has(socket)) return;
  failed.add(socket);
  // Nothing more is read from a connection whose framing is lost.
  socket.pause();
  const answer = rawAnswer((err as NodeJS.ErrnoException).code);
  cut(answer.cut);
  afterAnswers(socket, () => {
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    closeAfter(
      socket,
      rawResponse(answer.status, answer.body),
      // A parser that refused a request refuses every byte after it, so the rest can be read
      // (and dropped) until the peer's FIN. A request that timed out was parsed fine so far: the
      // rest of it would still reach a route, so nothing more is read from it.
      answer.cut === 'malformed_request',
    );
  });
}

/** A whole HTTP/1.1 answer with a JSON body that closes its connection. */
function rawResponse(status: string, body: string, headers: Readonly<Record<string, string>> = {}): string {
  const extra = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  return `HTTP/1.1 ${status}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}Connection: close\r\n\r\n${body}`;
}

/** How long a connection given its last answer may stay open for its peer to close it first. */
export const LINGER_MS = 1000;

/**
 * Writes `text` as the last bytes of the connection and makes sure its socket closes. The HTTP
 * server's sockets allow half-open connections, so after the server's FIN a socket closes only
 * once the peer's FIN has been read, and a paused socket never reads it: each connection answered
 * here would keep its descriptor and its place in the connection caps for good. With `drain`,
 * what the peer still sends is read, so that its FIN closes the socket at once; either way a
 * socket still open {@link LINGER_MS} after the answer is cut.
 */
export function closeAfter(socket: Duplex, text: string, drain: boolean): void {
  const cutOff = setTimeout(() => socket.destroy(), LINGER_MS);
  cutOff.unref();
  socket.once('close', () => clearTimeout(cutOff));
  socket.end(text);
  if (drain) socket.resume();
}
