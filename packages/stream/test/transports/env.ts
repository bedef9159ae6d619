/**
 * Server addresses for the transport integration tests, from the variables the server scripts
 * write. A missing variable fails the test file loudly instead of skipping it.
 */
function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run the tests with "npm run test:all", which starts the servers`);
  }
  return value;
}

export function redisUrl(): string {
  return required('SLUICE_REDIS_URL');
}

export function redisClusterNodes(): { host: string; port: number }[] {
  return required('SLUICE_REDIS_CLUSTER_NODES')
    .split(',')
    .map((hp) => {
      const [host, port] = hp.trim().split(':');
      return { host: host!, port: Number(port) };
    });
}

export function natsUrl(): string {
  return required('SLUICE_NATS_URL');
}

export function rocketMqEndpoints(): string {
  return required('SLUICE_ROCKETMQ_ENDPOINTS');
}

/** host and port of a `host:port` or `scheme://host:port` address. */
export function hostPort(address: string): { host: string; port: number } {
  const url = new URL(address.includes('://') ? address : `tcp://${address}`);
  return { host: url.hostname, port: Number(url.port) };
}
