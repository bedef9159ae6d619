/**
 * Server addresses for the governance integration tests (see test/env.ts: a missing variable
 * fails the test file loudly instead of skipping it).
 */
export { natsUrl, redisClusterNodes, redisUrl, rocketMqEndpoints, rocketMqProxyPid } from '../../../test/env.js';

/** A random key prefix, so runs never see each other's keys (also valid as a RocketMQ group). */
export function randomPrefix(label: string): string {
  return `${label}-${Math.random().toString(36).slice(2, 10)}`;
}
