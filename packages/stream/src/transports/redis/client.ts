/**
 * The Redis kit of `@sluice/redis` (an optional peer dependency, with ioredis), loaded once,
 * with a clear error when it is not installed.
 */
import type * as Kit from '@sluice/redis/kit';
import { loadPeer } from '../peer.js';

export const kit = await loadPeer<typeof Kit>(
  '@sluice/redis/kit',
  '@sluice/redis',
  '@sluice/stream/redis',
  '@sluice/redis ioredis',
);
