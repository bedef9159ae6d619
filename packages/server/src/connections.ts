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

/**
 * Caps the connections of `server` in total (Node's `maxConnections`: the excess is closed before
 * it is read) and per remote address, so one client cannot take every file descriptor of the
 * process. `accept` gets each connection within the caps; `cut` hears of each one closed.
 */
export function limitConnections(
  server: Server,
  limits: ConnectionLimits,
  cut: (reason: ConnectionCut) => void,
  accept: (socket: Socket) => void = () => undefined,
): void {
  server.maxConnections = limits.maxConnections;
  server.on('drop', () => cut('max_connections'));
  const perClient = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const client = socket.remoteAddress ?? '';
    const open = perClient.get(client) ?? 0;
    if (open >= limits.maxClientConnections) {
      cut('max_connections_per_client');
      socket.destroy();
      return;
    }
    perClient.set(client, open + 1);
    socket.once('close', () => {
      const left = (perClient.get(client) ?? 1) - 1;
      if (left > 0) perClient.set(client, left);
      else perClient.delete(client);
    });
    accept(socket);
  });
}
