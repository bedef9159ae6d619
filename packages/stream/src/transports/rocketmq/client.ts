/**
 * RocketMQ's published v2 gRPC protocol (apache/rocketmq-apis, vendored in proto/), spoken with
 * the optional peer dependencies `@grpc/grpc-js` and `@grpc/proto-loader`, loaded once with a
 * clear error when they are not installed.
 */
import { fileURLToPath } from 'node:url';
import type * as GrpcJs from '@grpc/grpc-js';
import type * as ProtoLoader from '@grpc/proto-loader';
import { loadPeer } from '../peer.js';

const ENTRY = '@sluice/stream/rocketmq';
export const grpc = await loadPeer<typeof GrpcJs>('@grpc/grpc-js', '@grpc/grpc-js', ENTRY, '@grpc/grpc-js @grpc/proto-loader');
const protoLoader = await loadPeer<typeof ProtoLoader>(
  '@grpc/proto-loader',
  '@grpc/proto-loader',
  ENTRY,
  '@grpc/grpc-js @grpc/proto-loader',
);

/** proto/ sits beside both src/ and dist/. */
const PROTO_DIR = fileURLToPath(new URL('../../../proto', import.meta.url));

/** Messages as plain objects: camelCase fields, enums as names, int64 as numbers, bytes as Buffers. */
const definition = protoLoader.loadSync('apache/rocketmq/v2/service.proto', {
  keepCase: false,
  longs: Number,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [PROTO_DIR],
});

/** The loaded `apache.rocketmq.v2.MessagingService` definition (a test serves it too). */
export const MESSAGING_SERVICE = definition['apache.rocketmq.v2.MessagingService'] as ProtoLoader.ServiceDefinition;

/** The client constructor of `apache.rocketmq.v2.MessagingService`. */
export const MessagingService = grpc.makeGenericClientConstructor(MESSAGING_SERVICE, 'MessagingService');
export type MessagingClient = InstanceType<typeof MessagingService>;

// The parts of the protocol's messages the transport reads and writes.

export interface Resource {
  name: string;
}
export interface Duration {
  seconds: number;
  nanos: number;
}
export interface Status {
  code?: string;
  message?: string;
}
export interface MessageQueue {
  topic?: Resource;
  id?: number;
  permission?: string;
  broker?: { name?: string };
}
export interface SystemProperties {
  tag?: string;
  messageId: string;
  messageType?: string;
  bornTimestamp?: { seconds: number; nanos: number };
  bornHost?: string;
  bodyEncoding?: string;
  receiptHandle?: string;
  liteTopic?: string;
  queueOffset?: number;
  deliveryAttempt?: number;
}
export interface Message {
  topic: Resource;
  systemProperties: SystemProperties;
  body: Uint8Array;
}

/** A protocol duration of `ms` milliseconds. */
export function duration(ms: number): Duration {
  return { seconds: Math.floor(ms / 1_000), nanos: (ms % 1_000) * 1_000_000 };
}
