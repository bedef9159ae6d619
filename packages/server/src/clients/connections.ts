import type { Server, Socket } from 'node:net';

/** Bounds on the connections of one listener. */
export interface ConnectionLimits {
  /** Most open connections in total; more are closed as they arrive (see {@link limitConnections}). */
  readonly maxConnections: number;
  /** Most open connections from one remote address; more are closed as they arrive. */
  readonly maxClientConnections: number;
}

/** Why a connection was closed by the server rather than by its client. */
export type ConnectionCut =
  | 'max_connections'
  | 'max_connections_per_client'
  | 'max_connections_shared'
  | 'request_timeout'
  | 'malformed_request'
  | 'write_timeout';

/** What {@link limitConnections} tells of the connections it sees. */
export interface ConnectionEvents {
  /** A connection closed by the server rather than by its client. */
  readonly cut: (reason: ConnectionCut) => void;
  /** The number of open connections within the caps changed by `delta`. */
  readonly open?: (delta: 1 | -1) => void;
  /** Gets each connection within the caps. */
  readonly accept?: (socket: Socket) => void;
  /** Whether a connection has no call in progress (such ones are given up first); none: all are busy. */
  readonly idle?: (socket: Socket) => boolean;
}

/** How far above the total cap the kernel's accepted connections may go before Node closes them unseen. */
const ACCEPT_SLACK = 64;

/**
 * Caps the connections of `server` in total and per remote address, so one client cannot take
 * every file descriptor of the process. A connection holds its place until its socket has closed.
 *
 * The total is shared by address: when it is reached, a new connection of an address holding at
 * least two fewer than the address holding the most is let in, and one connection of the latter
 * is closed in its place (an idle one if it has one, else its newest). So a dozen addresses at
 * their per-address cap cannot fill the listener for everyone else; a new connection of an
 * address already holding its share is closed as it arrives.
 */
export function limitConnections(server: Server, limits: ConnectionLimits, events: ConnectionEvents): void {
  const { cut, open = () => undefined, accept = () => undefined, idle = () => false } = events;
  // A hard bound for the connections no one sees (they are closed before being read); the rest
  // are counted and shared below.
  server.maxConnections = limits.maxConnections + ACCEPT_SLACK;
  server.on('drop', () => cut('max_connections'));
  /** Each address's open connections, oldest first. */
  const perClient = new Map<string, Set<Socket>>();
  let total = 0;
  /** Gives up a connection's place (once), before its socket has finished closing. */
  const release = (client: string, socket: Socket) => {
    const held = perClient.get(client);
    if (held?.delete(socket) !== true) return;
    if (held.size === 0) perClient.delete(client);
    total--;
    open(-1);
  };
  /** The connection to close so that `client` gets one: see above; undefined when none is due. */
  const displaced = (client: string): [string, Socket] | undefined => {
    let most: string | undefined;
    let size = 0;
    for (const [c, held] of perClient) {
      if (held.size > size) {
        most = c;
        size = held.size;
      }
    }
    if (most === undefined || size < (perClient.get(client)?.size ?? 0) + 2) return undefined;
    const held = [...perClient.get(most)!];
    return [most, held.find((s) => idle(s)) ?? held[held.length - 1]!];
  };
  server.on('connection', (socket: Socket) => {
    const client = socket.remoteAddress ?? '';
    if ((perClient.get(client)?.size ?? 0) >= limits.maxClientConnections) {
      cut('max_connections_per_client');
      socket.destroy();
      return;
    }
    if (total >= limits.maxConnections) {
      const victim = displaced(client);
      if (victim === undefined) {
        cut('max_connections');
        socket.destroy();
        return;
      }
      cut('max_connections_shared');
      release(...victim);
      victim[1].destroy();
    }
    let held = perClient.get(client);
    if (held === undefined) perClient.set(client, (held = new Set()));
    held.add(socket);
    total++;
    open(1);
    socket.once('close', () => release(client, socket));
    accept(socket);
  });
}
