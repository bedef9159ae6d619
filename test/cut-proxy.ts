/**
 * A loopback TCP forwarder between a transport and its real server, so a test can make the
 * server "go away" for one client without stopping the shared server: `down()` drops every
 * connection and refuses new ones, `up()` accepts again. With `replyDelayMs`, every byte the
 * server sends reaches the client that much later (in order): a distant or slow server.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import { once } from 'node:events';

export class CutProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
    public port: number,
    private readonly replyDelayMs = 0,
  ) {}

  /** Starts forwarding 127.0.0.1:<free port> to `host:port`. */
  static async start(host: string, port: number, options: { replyDelayMs?: number } = {}): Promise<CutProxy> {
    const proxy = new CutProxy(host, port, 0, options.replyDelayMs ?? 0);
    await proxy.up();
    return proxy;
  }

  /** Accepts connections again, on the same port as before. */
  async up(): Promise<void> {
    if (this.server) return;
    const server = createServer((client) => this.forward(client));
    server.listen(this.port, '127.0.0.1');
    await once(server, 'listening');
    const address = server.address();
    if (typeof address === 'object' && address !== null) this.port = address.port;
    this.server = server;
  }

  /** Drops every connection and refuses new ones. */
  async down(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    if (server) {
      const closed = once(server, 'close');
      server.close();
      await closed;
    }
  }

  private forward(client: Socket): void {
    const upstream = connect(this.targetPort, this.targetHost);
    this.sockets.add(client);
    this.sockets.add(upstream);
    const drop = (): void => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    if (this.replyDelayMs === 0) upstream.pipe(client);
    // Timers of one delay fire in the order they were set: the bytes stay in order.
    else upstream.on('data', (chunk: Buffer) => setTimeout(() => client.destroyed || client.write(chunk), this.replyDelayMs));
  }
}
