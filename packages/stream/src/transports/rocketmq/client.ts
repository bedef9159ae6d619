/** The RocketMQ 5 client (an optional peer dependency), loaded once, with a clear error when it is not installed. */
import type * as RocketMq from 'rocketmq-client-nodejs';
import { loadPeer } from '../peer.js';

export const rocketmq = await loadPeer<typeof RocketMq>(
  'rocketmq-client-nodejs',
  'rocketmq-client-nodejs',
  '@sluice/stream/rocketmq',
);
