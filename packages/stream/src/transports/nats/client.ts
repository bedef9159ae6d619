/** The nats.js client (an optional peer dependency), loaded once, with a clear error when it is not installed. */
import type * as Nats from 'nats';
import { loadPeer } from '../peer.js';

export const nats = await loadPeer<typeof Nats>('nats', 'nats', '@sluice/stream/nats');
