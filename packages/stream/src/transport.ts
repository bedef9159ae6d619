/**
 * The event stream between gateways and aggregators, and the decision channel back, behind one
 * interface. Implementations: in-process (the embedded default), Redis Streams, NATS JetStream
 * and Apache RocketMQ 5 (LiteTopic).
 *
 * - Events travel as opaque batches (bytes) on numbered partitions. The probe picks the
 *   partition (resource hash, optionally salted by time); a transport never looks inside.
 * - Each partition is consumed by one consumer group shared by all aggregators; which
 *   aggregator reads a partition is decided by partition ownership (`@sluice/governance`), not
 *   by the transport. A batch is acknowledged after its handler resolves, so a new owner
 *   continues where the old one stopped (at-least-once).
 * - Decisions (block / lift) are broadcast: every subscriber receives every message (fan-out).
 */
export interface EventTransport {
  /** Short name for logs and metrics, e.g. `memory`, `redis`, `nats`, `rocketmq`. */
  readonly name: string;
  /** Number of event partitions, fixed for the transport's life (1..1024). */
  readonly partitions: number;
  /**
   * True when every reader and writer of this stream lives in this process (`MemoryTransport`):
   * an aggregator may then keep partition ownership in memory. A broker transport leaves it
   * unset: processes elsewhere may read the same stream.
   */
  readonly inProcess?: boolean;
  /**
   * Appends one batch to a partition. Resolves once the stream accepted it; rejects with a
   * `TransportError` when it did not (the probe counts the batch as dropped).
   */
  publish(partition: number, batch: Uint8Array): Promise<void>;
  /**
   * Starts reading a partition on behalf of `group`, from the group's last acknowledged
   * position. `handler` runs for one batch at a time, in order; its batch is acknowledged when
   * it resolves. A handler that throws does not stop the subscription: the batch is
   * acknowledged anyway (a poison batch must never block its partition) and counted by the
   * caller.
   */
  consume(partition: number, group: string, handler: BatchHandler): Promise<Subscription>;
  /** Sends a decision message to every subscriber. */
  broadcast(message: Uint8Array): Promise<void>;
  /** Receives every broadcast message sent after the subscription started. */
  subscribeDecisions(handler: (message: Uint8Array) => void): Promise<Subscription>;
  /** Stops every subscription and frees connections. Idempotent. */
  close(): Promise<void>;
}

/** Handles one batch read from a partition. */
export type BatchHandler = (batch: Uint8Array, info: BatchInfo) => Promise<void>;

/** Where a batch came from. */
export interface BatchInfo {
  readonly partition: number;
  /** Batches waiting behind this one on the partition, when the transport knows (lag). */
  readonly lag?: number;
}

/** A running consumer or decision subscription. */
export interface Subscription {
  /** Stops reading; in-flight handlers finish first. Idempotent. */
  stop(): Promise<void>;
}
