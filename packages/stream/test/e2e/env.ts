/**
 * Server addresses for the governance end-to-end tests, from the variables the server scripts
 * write. A missing variable fails the test file loudly instead of skipping it.
 */
function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run the tests with "npm run test:all", which starts the servers`);
  }
  return value;
}

/** URL of the standalone Redis. */
export function redisUrl(): string {
  return required('SLUICE_REDIS_URL');
}

/** Redis Cluster seed nodes. */
export function redisClusterNodes(): { host: string; port: number }[] {
  return required('SLUICE_REDIS_CLUSTER_NODES')
    .split(',')
    .map((hp) => {
      const [host, port] = hp.trim().split(':');
      return { host: host!, port: Number(port) };
    });
}

/** A random key prefix, so runs never see each other's keys. */
export function randomPrefix(label: string): string {
  return `${label}-${Math.random().toString(36).slice(2, 10)}`;
}

/** URL of the NATS server (JetStream enabled). */
export function natsUrl(): string {
  return required('SLUICE_NATS_URL');
}

/** RocketMQ proxy endpoints. */
export function rocketMqEndpoints(): string {
  return required('SLUICE_ROCKETMQ_ENDPOINTS');
}
