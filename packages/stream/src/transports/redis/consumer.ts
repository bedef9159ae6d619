/**
 * One partition consumer of the Redis Streams transport, on its own connection (its blocking
 * XREADGROUP would hold up any other command on a shared one).
 *
 * Every consumer of a group uses the same consumer name: a new owner of the partition first
 * reads the entries its predecessor received but did not acknowledge (the pending list, read
 * with id `0`), then new ones (`>`). That is how positions survive an owner change.
 */
import type { BatchHandler, Subscription } from '../../transport.js';
import { backoffMs, runHandler, sleep, withTimeout, type TransportHooks } from '../common.js';
import { openRedis, type RedisClient, type RedisConnectSettings } from './connect.js';

const CONSUMER = 'owner';

/** What one consumer reads and where it reports. */
export interface RedisConsumerOptions {
  settings: RedisConnectSettings;
  key: string;
  partition: number;
  group: string;
  handler: BatchHandler;
  readCount: number;
  blockMs: number;
  hooks: TransportHooks;
  onStopped: () => void;
}

type Entry = [id: Buffer, fields: Buffer[] | null];

export class RedisStreamConsumer implements Subscription {
  private readonly conn: RedisClient;
  private readonly abort = new AbortController();
  private running: Promise<void> | undefined;
  private inHandler = false;
  private stopping: Promise<void> | undefined;

  constructor(private readonly o: RedisConsumerOptions) {
    this.conn = openRedis(o.settings, 'blocking');
  }

  /** Creates the group if needed (bounded), then starts reading in the background. */
  async start(): Promise<void> {
    await withTimeout(this.ensureGroup(), this.o.settings.commandTimeoutMs, 'consume');
    this.running = this.loop();
  }

  async stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.abort.abort();
      // A blocked read would only return after its BLOCK timeout: drop it. A running handler
      // finishes and its batch is acknowledged first.
      if (!this.inHandler) this.conn.disconnect();
      await this.running;
      this.conn.disconnect();
      this.o.onStopped();
    })();
    return this.stopping;
  }

  private async ensureGroup(): Promise<void> {
    try {
      // `0`: a new group starts at the oldest batch the stream still holds.
      await this.conn.xgroup('CREATE', this.o.key, this.o.group, '0', 'MKSTREAM');
    } catch (err) {
      if (!(err instanceof Error && err.message.startsWith('BUSYGROUP'))) throw err;
    }
  }

  private async loop(): Promise<void> {
    const { o } = this;
    const signal = this.abort.signal;
    let pending = true;
    let attempt = 0;
    while (!signal.aborted) {
      try {
        const args: (string | number)[] = ['GROUP', o.group, CONSUMER, 'COUNT', o.readCount];
        if (!pending) args.push('BLOCK', o.blockMs);
        args.push('STREAMS', o.key, pending ? '0' : '>');
        const entries = parseRead(await this.conn.callBuffer('XREADGROUP', ...args));
        attempt = 0;
        if (signal.aborted) break;
        if (entries.length === 0) {
          pending = false;
          continue;
        }
        // The group's lag is asked only when a full read suggests more is waiting.
        const groupLag = !pending && entries.length === o.readCount ? await this.groupLag() : 0;
        const acks: Buffer[] = [];
        for (const [i, [id, fields]] of entries.entries()) {
          const data = fields ? fieldValue(fields, 'd') : undefined;
          if (data) {
            this.inHandler = true;
            const batch = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
            const lag = groupLag === undefined ? undefined : entries.length - 1 - i + groupLag;
            await runHandler(o.handler, batch, { partition: o.partition, lag }, o.hooks.onHandlerError);
            this.inHandler = false;
          }
          // Entries trimmed away before they were read come back without fields: acknowledged too.
          acks.push(id);
          if (signal.aborted) break;
        }
        await withTimeout(this.conn.xack(o.key, o.group, ...acks), o.settings.commandTimeoutMs, 'ack');
      } catch (err) {
        this.inHandler = false;
        if (signal.aborted) break;
        o.hooks.onConsumeError?.(err, o.partition);
        if (err instanceof Error && err.message.startsWith('NOGROUP')) {
          // The stream or group was deleted under us: recreate and start over.
          await this.ensureGroup().catch(() => undefined);
        }
        await sleep(backoffMs(attempt++, o.settings.reconnectBaseMs, o.settings.reconnectMaxMs), signal);
        // Anything read but not acknowledged is in the pending list: read it again first.
        pending = true;
      }
    }
  }

  /** Entries in the stream the group has not read yet (Redis >= 7), or undefined. */
  private async groupLag(): Promise<number | undefined> {
    try {
      const groups = (await withTimeout(
        this.conn.call('XINFO', 'GROUPS', this.o.key),
        this.o.settings.commandTimeoutMs,
        'lag',
      )) as unknown[];
      for (const g of groups) {
        if (!Array.isArray(g)) continue;
        const fields = g as unknown[];
        const name = fields[fields.indexOf('name') + 1];
        if (name !== this.o.group) continue;
        const lag = fields[fields.indexOf('lag') + 1];
        return typeof lag === 'number' ? lag : undefined;
      }
    } catch {
      // Lag is advisory; a failed lookup must not stop consumption.
    }
    return undefined;
  }
}

/** XREADGROUP reply -> entries of the one stream read. */
function parseRead(reply: unknown): Entry[] {
  if (!Array.isArray(reply) || reply.length === 0) return [];
  const stream = reply[0] as unknown[];
  const entries = stream[1];
  return Array.isArray(entries) ? (entries as Entry[]) : [];
}

function fieldValue(fields: Buffer[], name: string): Buffer | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i]!.toString() === name) return fields[i + 1];
  }
  return undefined;
}
