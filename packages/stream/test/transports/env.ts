/**
 * Server addresses for the transport integration tests (see test/env.ts: a missing variable
 * fails the test file loudly instead of skipping it).
 */
export { natsUrl, redisClusterNodes, redisUrl, rocketMqEndpoints, rocketMqProxyPid } from '../../../../test/env.js';

/** host and port of a `host:port` or `scheme://host:port` address. */
export function hostPort(address: string): { host: string; port: number } {
  const url = new URL(address.includes('://') ? address : `tcp://${address}`);
  return { host: url.hostname, port: Number(url.port) };
}
