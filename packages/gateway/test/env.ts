/**
 * Server addresses for the gateway's integration tests against real streams (see test/env.ts:
 * a missing variable fails the file loudly instead of skipping it).
 */
export { natsUrl, redisUrl, rocketMqEndpoints } from '../../../test/env.js';

/** A random stream key prefix, so runs never see each other's streams. */
export function randomPrefix(): string {
  return `gw-${Math.random().toString(36).slice(2, 10)}`;
}
