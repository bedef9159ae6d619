import { constants as h2constants, type Http2Session, type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';

/** How long connections of the gRPC listener live, and how they are watched. */
export interface SessionLimits {
  /** A connection with no call in progress for this long is closed (GOAWAY). */
  readonly idleTimeoutMs: number;
  /** Every connection is asked to go away (GOAWAY) at this age. */
  readonly maxAgeMs: number;
  /** Calls in progress on a connection asked to go away may finish within this; then it is cut. */
  readonly ageGraceMs: number;
  /** A ping is sent after this long without one, to find peers that vanished without closing. */
  readonly keepaliveMs: number;
  /** A ping not answered within this closes the connection. */
  readonly keepaliveTimeoutMs: number;
  /**
   * An answer the peer has not taken within this (its flow-control window stays 0) cuts its
   * connection (GOAWAY ENHANCE_YOUR_CALM): a call that cannot be written is not held longer.
   */
  readonly writeTimeoutMs: number;
  /** Most calls in progress over all connections of one remote address; more are refused (REFUSED_STREAM). */
  readonly maxClientStreams: number;
  /** Told of each connection cut because its answers were not taken. */
  readonly onWriteTimeout?: () => void;
}

/** What is watched of one connection. */
interface SessionState {
  readonly client: string;
  active: number;
  idleSince: number;
  /** Answered calls whose answer is not written yet, with when they were answered (oldest first). */
  readonly writing: Map<ServerHttp2Stream, number>;
}

/**
 * The HTTP/2 connections of one gRPC listener and their lifetimes: each is closed when idle,
 * asked to go away at its age (then cut after a grace period), cut when its answers are not
 * taken, and pinged so that peers gone without a word do not count against the connection caps.
 * The calls in progress of one address are bounded over all its connections. One timer per
 * connection serves all of it, so a call costs a counter, not a timer.
 */
export class Sessions {
  readonly #limits: SessionLimits;
  readonly #open = new Map<Http2Session, SessionState>();
  /** Calls in progress per remote address. */
  readonly #streamsOf = new Map<string, number>();
  /** Each connection's state by its peer's address and port (a session's socket is a proxy of the listener's). */
  readonly #byPeer = new Map<string, SessionState>();
  #closing = false;

  constructor(limits: SessionLimits) {
    this.#limits = limits;
  }

  /** How many connections are open. */
  get size(): number {
    return this.#open.size;
  }

  /** Whether the connection of `socket` has no call in progress (a connection not yet an HTTP/2 session has none). */
  idle(socket: Socket): boolean {
    return (this.#byPeer.get(peerOf(socket))?.active ?? 0) === 0;
  }

  /**
   * Takes a new call of a watched connection, or refuses it (REFUSED_STREAM: the client may retry
   * it elsewhere) when its address has `maxClientStreams` calls in progress. False: refused.
   */
  admit(stream: ServerHttp2Stream): boolean {
    const state = this.#open.get(stream.session as Http2Session);
    if (state === undefined) return true;
    const held = this.#streamsOf.get(state.client) ?? 0;
    if (held >= this.#limits.maxClientStreams) {
      stream.close(h2constants.NGHTTP2_REFUSED_STREAM);
      return false;
    }
    this.#streamsOf.set(state.client, held + 1);
    state.active++;
    stream.once('close', () => {
      state.writing.delete(stream);
      state.active--;
      if (state.active === 0) state.idleSince = Date.now();
      const left = (this.#streamsOf.get(state.client) ?? 1) - 1;
      if (left > 0) this.#streamsOf.set(state.client, left);
      else this.#streamsOf.delete(state.client);
    });
    return true;
  }

  /** A call was answered: its answer must be taken by the peer within `writeTimeoutMs`. */
  answered(stream: ServerHttp2Stream): void {
    const state = this.#open.get(stream.session as Http2Session);
    if (state !== undefined && !stream.closed) state.writing.set(stream, Date.now());
  }

  /** Watches a new connection. */
  add(session: Http2Session): void {
    if (this.#closing) {
      session.destroy();
      return;
    }
    const limits = this.#limits;
    const born = Date.now();
    const socket = session.socket as Socket | undefined;
    const peer = socket === undefined ? undefined : peerOf(socket);
    const state: SessionState = { client: socket?.remoteAddress ?? '', active: 0, idleSince: born, writing: new Map() };
    this.#open.set(session, state);
    if (peer !== undefined) this.#byPeer.set(peer, state);
    let lastPing = born;
    let pingTimer: NodeJS.Timeout | undefined;
    let aged = false;
    const tickMs = Math.max(
      10,
      Math.min(limits.idleTimeoutMs, limits.keepaliveMs, limits.maxAgeMs, Math.ceil(limits.writeTimeoutMs / 2), 1000),
    );
    const tick = setInterval(() => {
      const now = Date.now();
      for (const answeredAt of state.writing.values()) {
        // The oldest answer still not taken: the peer keeps its window shut.
        if (now - answeredAt >= limits.writeTimeoutMs) {
          limits.onWriteTimeout?.();
          session.destroy(undefined, h2constants.NGHTTP2_ENHANCE_YOUR_CALM);
          return;
        }
        break;
      }
      if (!aged && now - born >= limits.maxAgeMs) {
        aged = true;
        session.close();
        setTimeout(() => session.destroy(), limits.ageGraceMs).unref();
        return;
      }
      if (state.active === 0 && now - state.idleSince >= limits.idleTimeoutMs) {
        session.close();
        return;
      }
      if (pingTimer === undefined && now - lastPing >= limits.keepaliveMs) {
        lastPing = now;
        pingTimer = setTimeout(() => session.destroy(), limits.keepaliveTimeoutMs).unref();
        const sent = session.ping((err) => {
          clearTimeout(pingTimer);
          pingTimer = undefined;
          if (err !== null) session.destroy();
        });
        if (!sent) {
          clearTimeout(pingTimer);
          pingTimer = undefined;
        }
      }
    }, tickMs).unref();
    // Errors of a connection end that connection only (the 'close' below cleans up).
    session.on('error', () => undefined);
    session.once('close', () => {
      clearInterval(tick);
      clearTimeout(pingTimer);
      this.#open.delete(session);
      if (peer !== undefined && this.#byPeer.get(peer) === state) this.#byPeer.delete(peer);
    });
  }

  /**
   * Asks every connection to go away (GOAWAY: calls in progress finish, no new ones) and cuts
   * those still open after `graceMs`; resolves once all are closed.
   */
  async close(graceMs: number): Promise<void> {
    this.#closing = true;
    const all = [...this.#open.keys()];
    const closed = all.map((s) => new Promise<void>((resolve) => (s.destroyed ? resolve() : s.once('close', () => resolve()))));
    for (const s of all) s.close();
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs);
    });
    await Promise.race([Promise.all(closed), grace]);
    clearTimeout(timer);
    for (const s of this.#open.keys()) s.destroy();
    await Promise.all(closed);
  }
}

/** A connection's peer as `address|port`. */
function peerOf(socket: Socket): string {
  return `${socket.remoteAddress ?? ''}|${socket.remotePort ?? ''}`;
}
