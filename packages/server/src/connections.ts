import type { Server, Socket } from 'node:net';

/** Bounds on the connections of one listener. */
export interface ConnectionLimits {
  /** Most open connections in total; more are closed as they arrive. */
  readonly maxConnections: number;
  /** Most open connections from one remote address; more are closed as they arrive. */
  readonly maxClientConnections: number;
}

/** Why a connection was closed by the server rather than by its client. */
export type ConnectionCut = 'max_connections' | 'max_connections_per_client' | 'request_timeout' | 'malformed_request';

/** What {@link limitConnections} tells of the connections it sees. */
export interface ConnectionEvents {
  /** A connection closed by the server rather than by its client. */
  readonly cut: (reason: ConnectionCut) => void;
  /** The number of open connections within the caps changed by `delta`. */
  readonly open?: (delta: 1 | -1) => void;
  /** Gets each connection within the caps. */
  readonly accept?: (socket: Socket) => void;
}

/**
 * Caps the connections of `server` in total (Node's `maxConnections`: the excess is closed before
 * it is read) and per remote address, so one client cannot take every file descriptor of the
 * process. A connection holds its place until its socket has closed.
 */
export function limitConnections(server: Server, limits: ConnectionLimits, events: ConnectionEvents): void {
  const { cut, open = () => undefined, accept = () => undefined } = events;
  server.maxConnections = limits.maxConnections;
  server.on('drop', () => cut('max_connections'));
  const perClient = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const client = socket.remoteAddress ?? '';
    const held = perClient.get(client) ?? 0;
    if (held >= limits.maxClientConnections) {
      cut('max_connections_per_client');
      socket.destroy();
      return;
    }
    perClient.set(client, held + 1);
    open(1);
    socket.once('close', () => {
      open(-1);
      const left = (perClient.get(client) ?? 1) - 1;
      if (left > 0) perClient.set(client, left);
      else perClient.delete(client);
    });
    accept(socket);
  });
}
