import type { Http2Session, ServerHttp2Stream } from 'node:http2';

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
}

/**
 * The HTTP/2 connections of one gRPC listener and their lifetimes: each is closed when idle,
 * asked to go away at its age (then cut after a grace period), and pinged so that peers gone
 * without a word do not count against the connection caps. One timer per connection serves all
 * three, so a call costs a counter, not a timer.
 */
export class Sessions {
  readonly #limits: SessionLimits;
  readonly #open = new Set<Http2Session>();
  #closing = false;

  constructor(limits: SessionLimits) {
    this.#limits = limits;
  }

  /** How many connections are open. */
  get size(): number {
    return this.#open.size;
  }

  /** Watches a new connection. */
  add(session: Http2Session): void {
    if (this.#closing) {
      session.destroy();
      return;
    }
    this.#open.add(session);
    const limits = this.#limits;
    const born = Date.now();
    let active = 0;
    let idleSince = born;
    let lastPing = born;
    let pingTimer: NodeJS.Timeout | undefined;
    let aged = false;
    const tickMs = Math.max(10, Math.min(limits.idleTimeoutMs, limits.keepaliveMs, limits.maxAgeMs, 1000));
    const tick = setInterval(() => {
      const now = Date.now();
      if (!aged && now - born >= limits.maxAgeMs) {
        aged = true;
        session.close();
        setTimeout(() => session.destroy(), limits.ageGraceMs).unref();
        return;
      }
      if (active === 0 && now - idleSince >= limits.idleTimeoutMs) {
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
    session.on('stream', (stream: ServerHttp2Stream) => {
      active++;
      stream.once('close', () => {
        active--;
        if (active === 0) idleSince = Date.now();
      });
    });
    // Errors of a connection end that connection only (the 'close' below cleans up).
    session.on('error', () => undefined);
    session.once('close', () => {
      clearInterval(tick);
      clearTimeout(pingTimer);
      this.#open.delete(session);
    });
  }

  /**
   * Asks every connection to go away (GOAWAY: calls in progress finish, no new ones) and cuts
   * those still open after `graceMs`; resolves once all are closed.
   */
  async close(graceMs: number): Promise<void> {
    this.#closing = true;
    const all = [...this.#open];
    const closed = all.map((s) => new Promise<void>((resolve) => (s.destroyed ? resolve() : s.once('close', () => resolve()))));
    for (const s of all) s.close();
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs);
    });
    await Promise.race([Promise.all(closed), grace]);
    clearTimeout(timer);
    for (const s of this.#open) s.destroy();
    await Promise.all(closed);
  }
}
